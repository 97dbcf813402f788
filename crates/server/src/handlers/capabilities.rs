//! `capabilities/discoverV2` and `capabilityRoots/discoverV1`: thin wrappers over
//! [`tether_engine::capabilities`], their typed errors mapped to codes.

use std::sync::Arc;

use tether_engine::capabilities::{self, DiscoveryError, DiscoveryErrorKind, InventoryCache};
use tether_engine::codex_config::Sources;
use tether_protocol::JsonRpcError;
use tether_protocol::RequestId;
use tether_protocol::capabilities::{DiscoverRootsParams, DiscoverV2Params};
use tether_protocol::envelope::encode_response;
use tether_protocol::error::{INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST};

/// A discovery call, decoded.
pub(crate) enum DiscoveryCall {
    Installed(Box<DiscoverV2Params>),
    Roots(DiscoverRootsParams),
}

/// Runs `call`; `cache` keeps the installed inventory between calls (one per server).
pub(crate) async fn run(
    id: &RequestId,
    call: DiscoveryCall,
    cache: &Arc<InventoryCache>,
) -> Result<String, JsonRpcError> {
    match call {
        DiscoveryCall::Installed(params) => {
            let sources = Sources::from_env();
            let found = capabilities::discover_installed(*params, &sources, cache).await;
            found.map(|response| encode_response(id, &*response)).map_err(to_rpc)
        }
        DiscoveryCall::Roots(params) => capabilities::discover_roots(params)
            .await
            .map(|response| encode_response(id, &response))
            .map_err(to_rpc),
    }
}

/// The answer to `call` when it is at hand without waiting (a `discoverV2` whose inventory
/// the cache holds, read in-process), encoded; `None`: [`run`] it.
pub(crate) fn answer_now(
    id: &RequestId,
    call: &DiscoveryCall,
    cache: &InventoryCache,
) -> Option<String> {
    let DiscoveryCall::Installed(params) = call else { return None };
    let inventory = capabilities::discover_installed_now(params, &Sources::from_env(), cache)?;
    Some(encode_response(id, &*inventory))
}

fn to_rpc(error: DiscoveryError) -> JsonRpcError {
    let code = match error.kind {
        DiscoveryErrorKind::TooManyRoots => INVALID_REQUEST,
        DiscoveryErrorKind::InvalidParams => INVALID_PARAMS,
        DiscoveryErrorKind::Failed => INTERNAL_ERROR,
    };
    JsonRpcError::new(code, error.message)
}
