//! `session/list` and `session/end` (Tether extension, `sessions`): a client's own sessions,
//! found and ended from any of its connections — what `tether sessions` and `tether kill`
//! show a person. Scoped by [`crate::auth::ClientId`]: one client never sees another's
//! sessions (a session id is what resumes it).

use serde_json::Value;
use tether_protocol::session::SessionEndParams;
use tether_protocol::{JsonRpcError, Method};

use super::{params_of, unit_params};
use crate::registry::EndRefusal;

pub(crate) enum SessionsCall {
    List,
    End(SessionEndParams),
}

impl SessionsCall {
    pub(crate) fn decode(method: Method, params: Option<Value>) -> Result<Self, JsonRpcError> {
        Ok(match method {
            Method::SessionEnd => SessionsCall::End(params_of(params)?),
            _ => {
                unit_params(params)?;
                SessionsCall::List
            }
        })
    }
}

/// A refused `session/end`, as the client hears it: each a `-32600`, but for one that is not
/// there (`-32004`).
pub(crate) fn refusal(refusal: EndRefusal, id: &str) -> JsonRpcError {
    match refusal {
        EndRefusal::NotFound => JsonRpcError::new(
            tether_protocol::error::NOT_FOUND,
            format!("no session {id} of yours on this server"),
        ),
        EndRefusal::Own => crate::rpc_error::invalid_request(
            "that is this connection's own session: close the connection to end it",
        ),
        EndRefusal::Attached => crate::rpc_error::invalid_request(format!(
            "session {id} is attached to another connection: end it there, or wait until it detaches"
        )),
    }
}
