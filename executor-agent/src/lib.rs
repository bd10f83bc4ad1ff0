//! The execution plane: registry of curated cards, plan intake, and the saga engine.
//! The engine (`saga::engine`) is pure: events in, commands out; drivers do the I/O.

pub mod saga;
