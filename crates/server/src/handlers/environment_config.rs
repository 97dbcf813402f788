//! `environmentConfig/read`: a thin wrapper over [`tether_engine::codex_config`], run on the
//! blocking pool (it reads files), its typed errors mapped to codes.

use tether_engine::codex_config::{self, ConfigErrorKind, Sources};
use tether_protocol::envelope::encode_response;
use tether_protocol::environment_config::EnvironmentConfigReadParams;
use tether_protocol::error::{INTERNAL_ERROR, INVALID_PARAMS};
use tether_protocol::{JsonRpcError, RequestId};

pub(crate) async fn run(
    id: &RequestId,
    params: EnvironmentConfigReadParams,
) -> Result<String, JsonRpcError> {
    let read =
        tokio::task::spawn_blocking(move || codex_config::read(&params, &Sources::from_env()))
            .await
            .map_err(|failed| {
                JsonRpcError::new(INTERNAL_ERROR, format!("config task failed: {failed}"))
            })?;
    match read {
        Ok(response) => Ok(encode_response(id, &response)),
        Err(error) => {
            let code = match error.kind {
                ConfigErrorKind::InvalidParams => INVALID_PARAMS,
                ConfigErrorKind::Load => INTERNAL_ERROR,
            };
            Err(JsonRpcError::new(code, error.message))
        }
    }
}
