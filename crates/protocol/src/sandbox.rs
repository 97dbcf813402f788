//! The `sandbox` member of `process/start` and of every `fs/*` call: what the client asks the
//! executor to confine the work to (Codex's `FileSystemSandboxContext`).
//!
//! These are wire types only; what an intent means on this host (which paths it names, which
//! confinement it needs) is the engine's `sandbox::policy`. The names of types, fields and
//! variants are the reference's, because a malformed intent is refused with serde's own words
//! (``unknown variant `rw`, expected one of `read`, `write`, `deny`, `none` ``), and clients
//! see those words.
//!
//! Unknown members are ignored everywhere, as the reference ignores them.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::PathUri;

/// The whole intent. `null` on the wire is no sandbox at all, and is not this type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(expecting = "struct WireFileSystemSandboxContext", rename_all = "camelCase")]
pub struct SandboxContext {
    pub permissions: Permissions,
    /// The directory `current_working_directory` means; the request's `cwd` without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathUri>,
    /// The project roots, when `policy_context` does not name them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_roots: Option<Vec<PathUri>>,
    /// Sent on `fs/*` calls; its roots take precedence over `workspace_roots`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_context: Option<PolicyContext>,
    /// Required, though it means nothing on Linux: the reference refuses an intent without it.
    pub windows_sandbox_level: WindowsSandboxLevel,
    /// Checked to be a URI, as the reference checks it; it has no meaning on Linux.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_home_dir: Option<PathUri>,
    /// Checked to be URIs; they grant nothing (the entries say what is writable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temporary_directories: Option<Vec<PathUri>>,
    /// Checked, otherwise ignored on Linux.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows_sandbox_proxy_settings_mode: Option<WindowsProxySettingsMode>,
    /// Asks for Landlock instead of bubblewrap. The reference then fails any restricted
    /// filesystem intent at exit, and so does Tether: Landlock cannot give the same answers.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub use_legacy_landlock: bool,
}

/// Where the project roots and the cwd come from on `fs/*` calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathUri>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_roots: Option<Vec<PathUri>>,
}

/// Windows' sandbox levels: required and checked, otherwise ignored here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowsSandboxLevel {
    Disabled,
    RestrictedToken,
    Elevated,
    Mxc,
}

/// How Windows reconciles proxy settings: checked, otherwise ignored here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowsProxySettingsMode {
    Reconcile,
    Preserve,
}

/// Who confines the work, and to what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Permissions {
    /// The executor confines the filesystem and the network as described.
    Managed { file_system: FileSystemPermissions, network: NetworkAccess },
    /// No confinement.
    Disabled,
    /// Somebody else confines the filesystem; the executor still keeps a restricted network
    /// from being reached.
    External { network: NetworkAccess },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum FileSystemPermissions {
    /// Only what the entries grant.
    Restricted { entries: Vec<FileSystemEntry> },
    /// Everything, read and write.
    Unrestricted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkAccess {
    Restricted,
    Enabled,
}

/// One grant: a path, and what may be done beneath it. The most specific path wins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSystemEntry {
    pub path: EntryPath,
    pub access: Access,
    /// `skip`: a path that does not exist grants nothing and is not an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_path_behavior: Option<MissingPathBehavior>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Access {
    Read,
    Write,
    /// The same as `none`.
    Deny,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MissingPathBehavior {
    Skip,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EntryPath {
    /// A path named by what it means (`root`, the project roots, `$TMPDIR`, …).
    Special { value: SpecialPath },
    /// One absolute path.
    Path { path: PathUri },
    /// Every existing match of an absolute glob, at launch.
    GlobPattern { pattern: String },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SpecialPath {
    /// `/`.
    Root,
    /// The platform's read-only basics (`/bin`, `/etc`, `/lib`, `/usr`, …) on an empty root.
    Minimal,
    CurrentWorkingDirectory,
    /// Each project root, joined with `subpath` when given.
    ProjectRoots {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subpath: Option<String>,
    },
    /// `$TMPDIR` of the child's final environment.
    Tmpdir,
    /// `/tmp`.
    SlashTmp,
    /// A kind this side does not know; it grants nothing.
    Unknown {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<Value>,
    },
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn decode(value: Value) -> Result<SandboxContext, String> {
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    fn special(kind: &str) -> Value {
        json!({"type": "special", "value": {"kind": kind}})
    }

    fn with_entry(entry: Value) -> Value {
        json!({"permissions": {"type": "managed", "network": "restricted",
            "file_system": {"type": "restricted", "entries": [entry]}},
            "windowsSandboxLevel": "disabled"})
    }

    #[test]
    fn codex_workspace_write_intent_decodes() {
        let mut entries = vec![
            json!({"path": special("root"), "access": "read"}),
            json!({"path": special("project_roots"), "access": "write"}),
            json!({"path": special("slash_tmp"), "access": "write"}),
            json!({"path": special("tmpdir"), "access": "write"}),
        ];
        for name in [".git", ".agents", ".codex", ".aws"] {
            entries.push(json!({"path": {"type": "special",
                "value": {"kind": "project_roots", "subpath": name}},
                "access": "read", "missing_path_behavior": "skip"}));
        }
        let intent = decode(json!({
            "permissions": {"type": "managed", "network": "restricted",
                "file_system": {"type": "restricted", "entries": entries}},
            "cwd": "file:///w", "workspaceRoots": ["file:///w"],
            "policyContext": {"cwd": "file:///w", "workspaceRoots": ["file:///w"]},
            "userHomeDir": "file:///root", "windowsSandboxLevel": "disabled",
            "windowsSandboxProxySettingsMode": "reconcile", "useLegacyLandlock": false,
        }))
        .unwrap();
        let Permissions::Managed {
            file_system: FileSystemPermissions::Restricted { entries }, ..
        } = intent.permissions
        else {
            panic!("managed and restricted")
        };
        assert_eq!(entries.len(), 8);
        assert_eq!(
            entries[7].path,
            EntryPath::Special {
                value: SpecialPath::ProjectRoots { subpath: Some(".aws".into()) }
            }
        );
        assert_eq!(entries[7].missing_path_behavior, Some(MissingPathBehavior::Skip));
    }

    /// The reference's words for each malformed intent (sandbox.md §2).
    #[test]
    fn malformed_intents_are_refused_in_the_references_words() {
        let cases = [
            (
                json!("X"),
                "invalid type: string \"X\", expected struct WireFileSystemSandboxContext",
            ),
            (json!({}), "missing field `permissions`"),
            (json!({"permissions": {"type": "disabled"}}), "missing field `windowsSandboxLevel`"),
            (
                json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "bogus"}),
                "unknown variant `bogus`, expected one of `disabled`, `restricted-token`, \
                 `elevated`, `mxc`",
            ),
            (
                json!({"permissions": {"type": "bogus"}, "windowsSandboxLevel": "disabled"}),
                "unknown variant `bogus`, expected one of `managed`, `disabled`, `external`",
            ),
            (
                json!({"permissions": {"type": "managed", "file_system": {"type": "unrestricted"}},
                    "windowsSandboxLevel": "disabled"}),
                "missing field `network`",
            ),
            (
                json!({"permissions": {"type": "managed", "network": "enabled"},
                    "windowsSandboxLevel": "disabled"}),
                "missing field `file_system`",
            ),
            (
                json!({"permissions": {"type": "managed", "network": "bogus",
                    "file_system": {"type": "unrestricted"}}, "windowsSandboxLevel": "disabled"}),
                "unknown variant `bogus`, expected `restricted` or `enabled`",
            ),
            (
                with_entry(json!({"path": special("root"), "access": "rw"})),
                "unknown variant `rw`, expected one of `read`, `write`, `deny`, `none`",
            ),
            (
                with_entry(
                    json!({"path": special("root"), "access": "read", "missing_path_behavior": "x"}),
                ),
                "unknown variant `x`, expected `skip`",
            ),
            (
                with_entry(json!({"path": special("future_thing"), "access": "read"})),
                "unknown variant `future_thing`, expected one of `root`, `minimal`, \
                 `current_working_directory`, `project_roots`, `tmpdir`, `slash_tmp`, `unknown`",
            ),
            (
                with_entry(json!({"path": {"type": "special"}, "access": "read"})),
                "missing field `value`",
            ),
            (
                with_entry(json!({"path": {"type": "path", "path": "/abs"}, "access": "read"})),
                "invalid URI: relative URL without a base",
            ),
            (
                json!({"permissions": {"type": "external"}, "windowsSandboxLevel": "disabled"}),
                "missing field `network`",
            ),
            (
                json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled",
                    "windowsSandboxProxySettingsMode": "bogus"}),
                "unknown variant `bogus`, expected `reconcile` or `preserve`",
            ),
            (
                json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled",
                    "userHomeDir": "/root"}),
                "invalid URI: relative URL without a base",
            ),
            (
                json!({"permissions": {"type": "disabled"}, "windowsSandboxLevel": "disabled",
                    "temporaryDirectories": ["/t"]}),
                "invalid URI: relative URL without a base",
            ),
        ];
        for (intent, words) in cases {
            assert_eq!(decode(intent.clone()).unwrap_err(), words, "{intent}");
        }
    }

    #[test]
    fn what_linux_ignores_is_accepted() {
        let intent = decode(json!({
            "permissions": {"type": "managed", "network": "enabled", "file_system":
                {"type": "restricted", "entries": [
                    {"path": {"type": "special", "value": {"kind": "unknown", "path": "x"}},
                     "access": "deny"},
                    {"path": {"type": "glob_pattern", "pattern": "/w/**/*.key"}, "access": "none"},
                ]}},
            "windowsSandboxLevel": "restricted-token", "temporaryDirectories": ["file:///t"],
            "extra": 1,
        }))
        .unwrap();
        assert_eq!(intent.windows_sandbox_level, WindowsSandboxLevel::RestrictedToken);
        assert!(
            decode(json!({"permissions": {"type": "external", "network": "enabled"},
            "windowsSandboxLevel": "elevated", "windowsSandboxProxySettingsMode": "preserve"}))
            .is_ok()
        );
    }
}
