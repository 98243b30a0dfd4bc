//! Small Linux facilities that both the daemon and its forked children use: process trees as
//! `/proc` shows them, moving a pipe's bytes into a file, positional reads into a buffer, a
//! thread's scheduling policy.

pub(crate) mod pipe;
pub(crate) mod pread;
pub(crate) mod proc_tree;
pub(crate) mod scheduling;
