//! The intent plane: goal to signed plan, submitted to the executor (built out in its own issue).
