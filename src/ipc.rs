//! Framed IPC over Unix-domain sockets. (Being written.)
