//! Request handlers, one module per method family. Each is thin: decode, call the engine, map
//! its errors. Decoding comes first and on its own ([`Call::decode`]) because the reference
//! checks params before the handshake: `process/start {}` before `initialize` is `-32602`.

pub(crate) mod capabilities;
pub(crate) mod environment_config;
pub(crate) mod fs;
pub(crate) mod http;
pub(crate) mod process;
pub(crate) mod sessions;

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
    Fs(Box<fs::FsCall>),
    Http(Box<tether_protocol::http::HttpRequestParams>),
    EnvironmentConfigRead(Box<tether_protocol::environment_config::EnvironmentConfigReadParams>),
    Discovery(Box<capabilities::DiscoveryCall>),
    Sessions(sessions::SessionsCall),
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
            Method::EnvironmentConfigRead => {
                Call::EnvironmentConfigRead(Box::new(params_of(params)?))
            }
            Method::CapabilitiesDiscoverV2 => Call::Discovery(Box::new(
                capabilities::DiscoveryCall::Installed(params_of(params)?),
            )),
            Method::CapabilityRootsDiscoverV1 => {
                Call::Discovery(Box::new(capabilities::DiscoveryCall::Roots(params_of(params)?)))
            }
            Method::SessionList | Method::SessionEnd => {
                Call::Sessions(sessions::SessionsCall::decode(method, params)?)
            }
            Method::Initialize => unreachable!("initialize is decoded by the processor"),
            // By the family in the name, so the params (a block's megabyte, say) are moved
            // into the one decoder they are for, never copied to try another.
            method if method.name().starts_with("fs/") => {
                Call::Fs(Box::new(fs::FsCall::decode(method, params)?))
            }
            method => match process::ProcessCall::decode(method, params)? {
                Some(call) => Call::Process(call),
                None => unreachable!("{} is neither a process nor a fs method", method.name()),
            },
        })
    }
}

/// Decodes a method's params, answering `-32602` with serde's own message.
pub(crate) fn params_of<T: DeserializeOwned>(params: Option<Value>) -> Result<T, JsonRpcError> {
    decode_params(params).map_err(|e| invalid_params(e.to_string()))
}

/// Methods without params accept absent params, `null`, or `{}`.
pub(crate) fn unit_params(params: Option<Value>) -> Result<(), JsonRpcError> {
    let params = params.filter(|p| !matches!(p, Value::Object(map) if map.is_empty()));
    params_of(params)
}

#[cfg(test)]
mod tests {
    //! Every method's params, decoded from any JSON at all: a typed call or a `-32602`/`-32600`,
    //! never a panic.

    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            (-1e9f64..1e9).prop_map(|f| json!(f)),
            "[a-z:/._-]{0,16}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("processId".to_owned()),
                        Just("argv".to_owned()),
                        Just("cwd".to_owned()),
                        Just("path".to_owned()),
                        Just("url".to_owned()),
                        Just("method".to_owned()),
                        Just("chunk".to_owned()),
                        Just("afterSeq".to_owned()),
                        Just("handleId".to_owned()),
                        Just("requestId".to_owned()),
                        "[a-zA-Z]{1,10}",
                    ],
                    inner,
                    0..6,
                )
                .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        #[test]
        fn params_of_every_method_decode_or_are_refused(
            // `initialize` is decoded by the processor itself, before any `Call`.
            method in prop::sample::select(
                Method::ALL.into_iter().filter(|m| *m != Method::Initialize).collect::<Vec<_>>()
            ),
            params in prop::option::of(json_value()),
        ) {
            if let Err(error) = Call::decode(method, params) {
                prop_assert!(error.code == -32602 || error.code == -32600, "{error:?}");
            }
        }
    }
}
