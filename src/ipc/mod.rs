//! What the daemon and the processes it forks (`crate::child`) say to each other: the typed
//! messages ([`message`]) and the socket transport under them ([`channel`]). Both sides import
//! this; it imports neither.

pub(crate) mod channel;
pub(crate) mod message;
