//! fuzzing
