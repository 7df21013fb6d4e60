//! Child-process supervision. (Being written.)
