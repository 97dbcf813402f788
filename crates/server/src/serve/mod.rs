//! Serving connections: each transport's connections (`websocket`, `stdio`), every one handed
//! to a processor ([`crate::processor`]) with its frames in and its outbound queue
//! ([`crate::transport`]). It sits above both, so that neither imports the other.

pub(crate) mod stdio;
pub(crate) mod websocket;
