//! Request handlers, one module per method family. Each is thin: decode, call the engine, map
//! its errors. Decoding comes first and on its own ([`Call::decode`]) because the reference
//! checks params before the handshake: `process/start {}` before `initialize` is `-32602`.

pub(crate) mod fs;
pub(crate) mod http;
pub(crate) mod process;

use serde::de::DeserializeOwned;
use serde_json::Value;
use tether_protocol::envelope::decode_params;
use tether_protocol::{JsonRpcError, Method};

use crate::rpc_error::invalid_params;

/// A decoded request, ready to run once the handshake allows it.
pub(crate) enum Call {
    EnvironmentInfo,
    EnvironmentStatus,
    Process(process::ProcessCall),
    Fs(fs::FsCall),
    Http(Box<tether_protocol::http::HttpRequestParams>),
}

impl Call {
    /// Decodes `params` for `method` (anything but `initialize`).
    pub(crate) fn decode(method: Method, params: Option<Value>) -> Result<Call, JsonRpcError> {
        Ok(match method {
            Method::EnvironmentInfo => {
                unit_params(params)?;
                Call::EnvironmentInfo
            }
            Method::EnvironmentStatus => {
                unit_params(params)?;
                Call::EnvironmentStatus
            }
            Method::HttpRequest => Call::Http(Box::new(params_of(params)?)),
            Method::Initialize => unreachable!("initialize is decoded by the processor"),
            method => match process::ProcessCall::decode(method, params.clone())? {
                Some(call) => Call::Process(call),
                None => Call::Fs(fs::FsCall::decode(method, params)?),
            },
        })
    }
}

/// Decodes a method's params, answering `-32602` with serde's own message.
pub(crate) fn params_of<T: DeserializeOwned>(params: Option<Value>) -> Result<T, JsonRpcError> {
    decode_params(params).map_err(|e| invalid_params(e.to_string()))
}

/// Methods without params accept absent params, `null`, or `{}`.
fn unit_params(params: Option<Value>) -> Result<(), JsonRpcError> {
    let params = params.filter(|p| !matches!(p, Value::Object(map) if map.is_empty()));
    params_of(params)
}
