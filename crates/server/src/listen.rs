//! Parsing `--listen`: `ws://IP:PORT` or `stdio`.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// The default: loopback, an ephemeral port. Exposing an executor is a decision, not a default.
pub const DEFAULT_LISTEN: &str = "ws://127.0.0.1:0";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    WebSocket(SocketAddr),
    Stdio,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenAddressError {
    #[error("invalid websocket --listen URL {0}; expected ws://IP:PORT")]
    InvalidWebSocket(String),
    #[error("unsupported --listen URL {0}; expected ws://IP:PORT or stdio")]
    Unsupported(String),
}

impl FromStr for ListenAddress {
    type Err = ListenAddressError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "stdio" || text == "stdio://" {
            return Ok(ListenAddress::Stdio);
        }
        match text.strip_prefix("ws://") {
            Some(rest) => rest
                .trim_end_matches('/')
                .parse()
                .map(ListenAddress::WebSocket)
                .map_err(|_| ListenAddressError::InvalidWebSocket(text.to_owned())),
            None => Err(ListenAddressError::Unsupported(text.to_owned())),
        }
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::WebSocket(addr) => write!(f, "ws://{addr}"),
            ListenAddress::Stdio => f.write_str("stdio"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_forms() {
        assert_eq!(
            DEFAULT_LISTEN.parse(),
            Ok(ListenAddress::WebSocket("127.0.0.1:0".parse().unwrap()))
        );
        assert_eq!("stdio".parse(), Ok(ListenAddress::Stdio));
        assert_eq!("stdio://".parse(), Ok(ListenAddress::Stdio));
        assert_eq!(
            "ws://[::1]:9000".parse(),
            Ok(ListenAddress::WebSocket("[::1]:9000".parse().unwrap()))
        );
    }

    #[test]
    fn refuses_host_names_and_other_schemes() {
        assert_eq!(
            "ws://localhost:1".parse::<ListenAddress>().unwrap_err().to_string(),
            "invalid websocket --listen URL ws://localhost:1; expected ws://IP:PORT"
        );
        assert_eq!(
            "tcp://127.0.0.1:1".parse::<ListenAddress>().unwrap_err().to_string(),
            "unsupported --listen URL tcp://127.0.0.1:1; expected ws://IP:PORT or stdio"
        );
    }
}
