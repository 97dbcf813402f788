//! Params as tests build them: the process most tests start (a `/bin/sh -c` script on pipes in
//! `/tmp`, with a `PATH`), and typed params read from JSON as a client writes it, every member
//! checked to be one the type has.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

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

/// `value` read as `T`, as a server reads a client's JSON, except that a member `T` does not
/// have fails the test instead of being ignored: the wire types accept unknown members, so a
/// misspelt one would otherwise leave its default in place and the test would check that.
///
/// A member is known when it comes back as `T` is written out again, or, for one written out
/// only when it is not its default, when giving it a value no member takes makes the read fail.
#[track_caller]
pub fn strict<T: DeserializeOwned + Serialize>(value: Value) -> T {
    let read: T = serde_json::from_value(value.clone())
        .unwrap_or_else(|error| panic!("invalid params {value}: {error}"));
    let written = serde_json::to_value(&read).expect("params write out as JSON");
    let mut unknown = Vec::new();
    unknown_members::<T>(&value, &written, "", &value, &mut unknown);
    assert!(
        unknown.is_empty(),
        "{} has no member {} (in {value})",
        std::any::type_name::<T>(),
        unknown.join(", ")
    );
    read
}

/// The members under `given` (at `pointer` in `whole`) that `T` does not have, found beside
/// `written`, what `T` wrote out for them.
fn unknown_members<T: DeserializeOwned>(
    given: &Value,
    written: &Value,
    pointer: &str,
    whole: &Value,
    unknown: &mut Vec<String>,
) {
    match (given, written) {
        (Value::Object(given), Value::Object(written)) => {
            for (name, member) in given {
                let here = format!("{pointer}/{}", name.replace('~', "~0").replace('/', "~1"));
                match written.get(name) {
                    Some(written) => unknown_members::<T>(member, written, &here, whole, unknown),
                    None if ignored::<T>(whole, &here) => unknown.push(format!("`{here}`")),
                    None => {}
                }
            }
        }
        (Value::Array(given), Value::Array(written)) => {
            for (index, (member, written)) in given.iter().zip(written).enumerate() {
                unknown_members::<T>(
                    member,
                    written,
                    &format!("{pointer}/{index}"),
                    whole,
                    unknown,
                );
            }
        }
        _ => {}
    }
}

/// Whether `T` still reads `whole` with the member at `pointer` given values that no typed
/// member takes: then the member is not read at all.
fn ignored<T: DeserializeOwned>(whole: &Value, pointer: &str) -> bool {
    [json!([null, true, 0.5, "\u{1}", {}]), json!({"\u{1}": [[[]]]})].into_iter().all(|probe| {
        let mut probed = whole.clone();
        *probed.pointer_mut(pointer).expect("the member is there") = probe;
        serde_json::from_value::<T>(probed).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_protocol::fs::FsReadFileParams;

    #[test]
    fn a_member_the_params_have_is_taken_even_where_it_is_not_written_out() {
        let read: FsReadFileParams = strict(json!({"path": "file:///x", "followSymlinks": null}));
        assert_eq!(read.path.to_string(), "file:///x");
    }

    #[test]
    #[should_panic(expected = "has no member `/followSymLinks`")]
    fn a_misspelt_member_fails() {
        let _: FsReadFileParams = strict(json!({"path": "file:///x", "followSymLinks": false}));
    }
}
