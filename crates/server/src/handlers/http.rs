//! `http/request`: requests made from the executor's side, buffered or with the body streamed
//! as `http/request/bodyDelta` notifications.

use tether_protocol::envelope::encode_error;
use tether_protocol::error::METHOD_NOT_FOUND;
use tether_protocol::http::HttpRequestParams;
use tether_protocol::method::not_implemented_message;
use tether_protocol::{JsonRpcError, RequestId};

use crate::transport::Outbound;

/// The streamed requests of one connection; they end with it.
#[derive(Default)]
pub(crate) struct HttpConnection {}

impl HttpConnection {
    /// Runs one request to completion, answering on `outbound` (and, for a streamed body,
    /// sending its deltas after the answer). Runs in its own task: a slow peer must not hold up
    /// the connection's other requests.
    pub(crate) async fn run(&self, id: RequestId, _params: HttpRequestParams, outbound: Outbound) {
        let error = JsonRpcError::new(METHOD_NOT_FOUND, not_implemented_message("http/request"));
        let _ = outbound.send(encode_error(&id, &error)).await;
    }
}
