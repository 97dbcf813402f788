//! Sandbox intents: what a client asks to be confined to, and whether Tether can honour it.
//!
//! Tether enforces no sandbox of its own: it is meant to run inside one (a container, a VM).
//! An intent that asks for nothing (`disabled`), or says the confinement is somebody else's
//! (`external`), is honoured by running as is. Any restriction Tether would have to enforce
//! itself is refused, never silently ignored: a client that asked for a read-only filesystem
//! must not get a writable one.

use serde_json::Value;

/// The refusal, worded as the reference words it, with what to do about it.
pub const CANNOT_ENFORCE: &str = "sandbox intent cannot be enforced on this executor";

/// `Ok` when `sandbox` (a `FileSystemSandboxContext`) asks for no confinement Tether would have
/// to provide.
pub fn check_intent(sandbox: &Value) -> Result<(), String> {
    if sandbox.is_null() {
        return Ok(());
    }
    let permissions = &sandbox["permissions"];
    // Codex writes `"network": "restricted"`; accept the object form too.
    let network = &permissions["network"];
    let network_restricted = network == "restricted" || network["type"] == "restricted";
    let honoured = match permissions["type"].as_str() {
        Some("disabled" | "external") => true,
        Some("managed") => {
            permissions["file_system"]["type"] == "unrestricted" && !network_restricted
        }
        _ => false,
    };
    if honoured {
        Ok(())
    } else {
        Err(format!(
            "{CANNOT_ENFORCE}: Tether runs commands without a sandbox of its own; \
             run the client without one (Codex: `--sandbox danger-full-access`) and isolate the \
             executor itself, in a container or VM"
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn honours_intents_that_ask_for_nothing() {
        assert!(check_intent(&Value::Null).is_ok());
        for permissions in [
            json!({"type": "disabled"}),
            json!({"type": "external"}),
            json!({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "enabled"}),
        ] {
            let intent = json!({"permissions": permissions, "windowsSandboxLevel": "disabled"});
            assert!(check_intent(&intent).is_ok(), "{intent}");
        }
    }

    #[test]
    fn refuses_restrictions_it_would_have_to_enforce() {
        // What Codex sends in its read-only mode.
        let read_only = json!({"permissions": {"type": "managed", "file_system": {"type": "restricted",
            "entries": [{"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"}]},
            "network": "restricted"}, "windowsSandboxLevel": "disabled"});
        let error = check_intent(&read_only).unwrap_err();
        assert!(error.starts_with(CANNOT_ENFORCE), "{error}");
        let network_only = json!({"permissions": {"type": "managed",
            "file_system": {"type": "unrestricted"}, "network": "restricted"}});
        assert!(check_intent(&network_only).is_err());
        assert!(check_intent(&json!({"permissions": {"type": "new-kind"}})).is_err());
    }
}
