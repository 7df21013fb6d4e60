//! Fashion-MNIST acquisition and strict IDX parsing. (Being written.)
pub mod cli;
