//! A panic while one request is handled is that request's failure, not the connection's: the
//! request is answered `-32603` and the connection goes on serving.
//!
//! Without this, a panic on the connection's task would end the connection without an answer,
//! and one in a request's own task would leave the request unanswered for good. What the
//! handler was changing may be left half-done; the client hears that the request failed, and
//! the connection's other requests and the server's other sessions go on.

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use tether_protocol::JsonRpcError;
use tether_protocol::error::INTERNAL_ERROR;
use tracing::error;

/// Runs the handling of one request, catching a panic in it: the error to answer with then.
pub(crate) async fn contained(
    method: &str,
    handling: impl Future<Output = ()>,
) -> Result<(), JsonRpcError> {
    AssertUnwindSafe(handling).catch_unwind().await.map_err(|_| {
        error!(%method, "a request's handling panicked; answered as an internal error");
        JsonRpcError::new(
            INTERNAL_ERROR,
            format!(
                "the server failed while handling {method} and goes on serving: send the \
                 request again, and report it if it fails the same way"
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_is_an_internal_error_and_the_next_request_is_handled() {
        let failed = contained("fs/remove", async { panic!("a handler's bug") }).await;

        let error = failed.unwrap_err();
        assert_eq!(error.code, -32603);
        assert_eq!(
            error.message,
            "the server failed while handling fs/remove and goes on serving: send the request \
             again, and report it if it fails the same way"
        );
        let mut handled = false;
        contained("environment/info", async { handled = true }).await.unwrap();
        assert!(handled);
    }
}
