//! The process most tests start: a `/bin/sh -c` script on pipes in `/tmp`, with a `PATH`.

use std::collections::BTreeMap;

use tether_protocol::PathUri;
use tether_protocol::process::ExecParams;

/// `process/start` params for `/bin/sh -c script`.
pub fn shell_params(id: &str, script: &str) -> ExecParams {
    let mut params = ExecParams::new(
        id,
        vec!["/bin/sh".into(), "-c".into(), script.into()],
        PathUri::parse("file:///tmp").expect("a valid URI"),
    );
    params.env = BTreeMap::from([("PATH".to_string(), "/usr/bin:/bin".to_string())]);
    params
}
