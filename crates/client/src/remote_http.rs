//! HTTP from the executor's network position over a session: [`ExecServerClient`] is an
//! [`HttpClient`].
//!
//! A buffered request is one `http/request` call. It is not resent after a drop: the request
//! may have reached its peer, and not every request is safe to send twice.
//!
//! A streamed request gets a fresh `requestId` and its route before the request is sent; the
//! router hands its `http/request/bodyDelta`s to it (`crate::http_streams`).

use async_trait::async_trait;
use futures_util::stream;
use tether_engine::http::{
    HttpBodyError, HttpBodyStream, HttpClient, HttpError, HttpSendError, InvalidHttpRequest,
    SendCause, TransportFailure,
};
use tether_protocol::ByteChunk;
use tether_protocol::error::INVALID_PARAMS;
use tether_protocol::http::{HttpRequestParams, HttpRequestResponse};
use tether_protocol::method::Method;

use crate::client::ExecServerClient;
use crate::error::ClientError;
use crate::session::Retry;

#[async_trait]
impl HttpClient for ExecServerClient {
    async fn request(
        &self,
        mut params: HttpRequestParams,
    ) -> Result<HttpRequestResponse, HttpError> {
        params.stream_response = false;
        params.attach_body = self.tether_extensions().attached_http_bodies;
        let method = Method::HttpRequest.name();
        if !params.attach_body {
            return self.call(method, &params, Retry::Never).await.map_err(http_error);
        }
        // The body raw beside the answer. Never resent, as without it.
        let (head, body): (HttpRequestResponse, _) = self
            .session
            .call_for_attached(method, &params, Retry::Never)
            .await
            .map_err(http_error)?;
        Ok(HttpRequestResponse { body_base64: ByteChunk(body), ..head })
    }

    async fn request_streamed(
        &self,
        mut params: HttpRequestParams,
    ) -> Result<(HttpRequestResponse, HttpBodyStream), HttpError> {
        let connection = self.connected().await.map_err(http_error)?;
        let streams = &self.session.http_streams();
        params.request_id = streams.next_request_id();
        params.stream_response = true;
        // The bytes raw beside each delta, where the server can send them so.
        params.attach_body = self.tether_extensions().attached_http_bodies;
        let body = streams.register(&params.request_id, connection.generation);
        // On the connection the route was registered for: a stream cannot move to another.
        let response = connection
            .call::<_, HttpRequestResponse>(Method::HttpRequest.name(), &params)
            .await
            .map_err(http_error)?;
        let body = stream::unfold(body, |body| async move { body.next().await.map(|r| (r, body)) });
        Ok((response, HttpBodyStream::new(body)))
    }
}

/// The server's error as the variant it stands for, so that it reads as a local client's
/// error would (`http/request failed: …`, `failed to read http/request response body: …`, or
/// the validation message itself). The code says refused (`-32602`) or failed; a Tether
/// server's `data` says which failure (`sendFailure`, `bodyFailure`) with its reason. The
/// reference sends only its words, whose two fixed prefixes are then the only mark of the
/// kind ([`REFERENCE_SEND_PREFIX`], [`REFERENCE_BODY_PREFIX`]); anything else stays the
/// server's words. What the client reports itself (a drop, a lost session) is a failure to
/// send.
pub(crate) fn http_error(error: ClientError) -> HttpError {
    match error {
        ClientError::Server { code: INVALID_PARAMS, message, .. } => {
            HttpError::Invalid(InvalidHttpRequest::Remote(message))
        }
        ClientError::Server { message, data, .. } => {
            let data = data.unwrap_or_default();
            if let Some(reason) = data["bodyFailure"]["reason"].as_str() {
                return HttpError::Body(HttpBodyError(reason.to_owned()));
            }
            let send = &data["sendFailure"];
            if let Some(reason) = send["reason"].as_str() {
                return HttpError::Failed(HttpSendError::Transport(TransportFailure {
                    message: reason.to_owned(),
                    cause: send["cause"].as_str().map_or(SendCause::Other, SendCause::parse),
                    detail: send["detail"].as_str().map(str::to_owned),
                }));
            }
            if let Some(reason) = message.strip_prefix(REFERENCE_BODY_PREFIX) {
                return HttpError::Body(HttpBodyError(reason.to_owned()));
            }
            match message.strip_prefix(REFERENCE_SEND_PREFIX) {
                Some(reason) => {
                    HttpError::Failed(HttpSendError::Transport(TransportFailure::other(reason)))
                }
                None => HttpError::Remote(message),
            }
        }
        // The connection to the executor failed, not the executor's request.
        error => {
            HttpError::Failed(HttpSendError::Transport(TransportFailure::other(error.to_string())))
        }
    }
}

/// How the reference begins the message of a request that got no response.
pub const REFERENCE_SEND_PREFIX: &str = "http/request failed: ";
/// How the reference begins the message of a body that broke off.
pub const REFERENCE_BODY_PREFIX: &str = "failed to read http/request response body: ";
