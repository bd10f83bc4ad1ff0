//! The execution plane: registry of curated cards, plan intake, the durable saga engine (built out in its own issue).
