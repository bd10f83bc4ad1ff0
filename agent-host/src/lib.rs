//! The A2A 1.0 hosting layer every Sagaplane agent stands on (built out in its own issue).
