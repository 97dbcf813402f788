//! What a sandbox intent means on this host: which confinement it needs, and which paths it
//! grants how.
//!
//! Pure: it reads no file and starts nothing, so every rule is tested without processes. Which
//! resolved paths exist, and how each is mounted, is [`super::mounts`]'s work.

use std::path::{Component, Path, PathBuf};

use tether_protocol::PathUri;
use tether_protocol::sandbox::{
    Access, EntryPath, FileSystemEntry, FileSystemPermissions, MissingPathBehavior, NetworkAccess,
    Permissions, SandboxContext, SpecialPath, WindowsSandboxLevel,
};

/// What must be done to honour an intent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confinement {
    /// Nothing to enforce (`disabled`, or everything allowed): runs as is.
    Unconfined,
    /// The filesystem is everybody's, the network is not: `no_new_privs` and the network
    /// filter, with the host's mounts, network namespace and capabilities kept.
    NetworkFilter,
    /// A filesystem restriction: the whole sandbox (mount, user, pid and ipc namespaces, and a
    /// network namespace when the network is restricted).
    Full(FullPolicy),
    /// `useLegacyLandlock` with a restricted filesystem. Landlock cannot give the answers the
    /// client expects (its errors are EACCES, not EROFS, and it cannot protect `.git` inside a
    /// writable root), so the work fails, as the reference's does, rather than run otherwise
    /// confined.
    LegacyLandlock,
}

/// A restricted filesystem: what is readable at all, then the grants beneath it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullPolicy {
    pub base: Base,
    /// Resolved grants, each path absolute and normalised, at most one per path (the winner of
    /// a tie), ordered least specific first: mounting them in this order makes the most
    /// specific path win.
    pub grants: Vec<Grant>,
    /// `none` globs, expanded to their existing matches at launch.
    pub denied_globs: Vec<String>,
    pub network: NetworkAccess,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// `/` readable (and nothing writable but the grants).
    Root,
    /// The platform's basics only, read-only.
    Minimal,
    /// Nothing at all but the grants.
    Empty,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub path: PathBuf,
    pub access: GrantAccess,
    /// A missing path grants nothing and is no error.
    pub skip_if_missing: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum GrantAccess {
    Read,
    Write,
    /// `none` or `deny`: hidden.
    None,
}

/// Names that stay read-only at the top of every writable root, whether or not the intent
/// lists them: a sandboxed agent must not rewrite the repository's hooks or config, its
/// agent instructions, or cloud credentials.
pub const PROTECTED_NAMES: [&str; 4] = [".git", ".agents", ".codex", ".aws"];

/// Everything besides the intent that decides what it means.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The request's own `cwd`: what `current_working_directory` means without `sandbox.cwd`.
    pub request_cwd: &'a Path,
    /// `TMPDIR` of the child's final environment.
    pub tmpdir: Option<&'a str>,
    /// Whether `/tmp` is a directory here (`slash_tmp` names nothing otherwise).
    pub slash_tmp_is_dir: bool,
}

/// Why an intent cannot be resolved. The words are the reference's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A path that names nothing on Linux (a Windows drive); carries the URI.
    #[error("invalid sandbox permission path: '{0}' is invalid on 'linux'")]
    InvalidPath(String),
    /// `windowsSandboxLevel: "mxc"` asks for a Windows facility this host cannot have.
    #[error("native MXC is unavailable on this executor")]
    MxcUnavailable,
}

/// Resolves `intent` into what must be enforced.
pub fn resolve(intent: &SandboxContext, context: Context<'_>) -> Result<Confinement, PolicyError> {
    if intent.windows_sandbox_level == WindowsSandboxLevel::Mxc {
        return Err(PolicyError::MxcUnavailable);
    }
    let (file_system, network) = match &intent.permissions {
        Permissions::Disabled => return Ok(Confinement::Unconfined),
        Permissions::External { network } => (None, *network),
        Permissions::Managed { file_system, network } => (Some(file_system), *network),
    };
    let entries = match file_system {
        None | Some(FileSystemPermissions::Unrestricted) => None,
        Some(FileSystemPermissions::Restricted { entries }) => Some(entries),
    };
    let policy = match entries {
        Some(entries) => Some(resolve_entries(entries, intent, context)?),
        None => None,
    };
    let full_write = policy.as_ref().is_none_or(FullPolicy::writes_everything);
    Ok(match (full_write, network) {
        (true, NetworkAccess::Enabled) => Confinement::Unconfined,
        (true, NetworkAccess::Restricted) => Confinement::NetworkFilter,
        (false, _) if intent.use_legacy_landlock => Confinement::LegacyLandlock,
        (false, _) => Confinement::Full(policy.expect("a restricted filesystem has a policy")),
    })
}

impl FullPolicy {
    /// `/` writable and nothing narrower taken away: the filesystem is not restricted at all.
    fn writes_everything(&self) -> bool {
        self.denied_globs.is_empty()
            && self
                .grants
                .iter()
                .any(|g| g.path == Path::new("/") && g.access == GrantAccess::Write)
            && self.grants.iter().all(|g| g.access == GrantAccess::Write)
    }

    /// Whether everything is readable (`/` read, nothing hidden): reads need no sandbox then.
    pub fn reads_everything(&self) -> bool {
        self.base == Base::Root
            && self.denied_globs.is_empty()
            && self.grants.iter().all(|g| g.access != GrantAccess::None)
    }

    /// The writable roots, least specific first.
    pub fn writable_roots(&self) -> impl Iterator<Item = &Grant> {
        self.grants.iter().filter(|g| g.access == GrantAccess::Write)
    }
}

fn resolve_entries(
    entries: &[FileSystemEntry],
    intent: &SandboxContext,
    context: Context<'_>,
) -> Result<FullPolicy, PolicyError> {
    let project_roots = project_roots(intent)?;
    let cwd =
        match intent.policy_context.as_ref().and_then(|p| p.cwd.as_ref()).or(intent.cwd.as_ref()) {
            Some(uri) => native(uri)?,
            None => normalise(context.request_cwd),
        };
    let mut base = Base::Empty;
    let mut grants: Vec<Grant> = Vec::new();
    let mut denied_globs = Vec::new();
    for entry in entries {
        let access = match entry.access {
            Access::Read => GrantAccess::Read,
            Access::Write => GrantAccess::Write,
            Access::Deny | Access::None => GrantAccess::None,
        };
        let skip_if_missing = entry.missing_path_behavior == Some(MissingPathBehavior::Skip);
        let paths: Vec<PathBuf> = match &entry.path {
            EntryPath::Path { path } => vec![native(path)?],
            EntryPath::GlobPattern { pattern } => {
                if access == GrantAccess::None {
                    // A relative pattern is the policy cwd's, as the reference reads it.
                    denied_globs.push(match pattern.starts_with('/') {
                        true => pattern.clone(),
                        false => format!("{}/{pattern}", cwd.display()),
                    });
                }
                // A glob grants nothing: only what it hides is enforced.
                continue;
            }
            EntryPath::Special { value } => match value {
                SpecialPath::Root => vec![PathBuf::from("/")],
                SpecialPath::Minimal => {
                    if access == GrantAccess::Read && base == Base::Empty {
                        base = Base::Minimal;
                    }
                    continue;
                }
                SpecialPath::CurrentWorkingDirectory => vec![cwd.clone()],
                SpecialPath::ProjectRoots { subpath } => project_roots
                    .iter()
                    .map(|root| match subpath {
                        Some(sub) => normalise(&root.join(sub)),
                        None => root.clone(),
                    })
                    .collect(),
                SpecialPath::Tmpdir => match context.tmpdir {
                    Some(dir) if !dir.is_empty() && Path::new(dir).is_absolute() => {
                        vec![normalise(Path::new(dir))]
                    }
                    _ => continue,
                },
                SpecialPath::SlashTmp if context.slash_tmp_is_dir => vec![PathBuf::from("/tmp")],
                SpecialPath::SlashTmp | SpecialPath::Unknown { .. } => continue,
            },
        };
        for path in paths {
            add_grant(&mut grants, Grant { path, access, skip_if_missing });
        }
    }
    // `/` readable is the base, not a mount. `/` writable is readable too: the base, and a
    // grant bound writable over it.
    match grants.iter().position(|g| g.path == Path::new("/")) {
        Some(at) if grants[at].access == GrantAccess::Read => {
            grants.remove(at);
            base = Base::Root;
        }
        Some(at) if grants[at].access == GrantAccess::Write => base = Base::Root,
        _ => {}
    }
    grants.sort_by_key(|g| g.path.components().count());
    let network = match &intent.permissions {
        Permissions::Managed { network, .. } | Permissions::External { network } => *network,
        Permissions::Disabled => NetworkAccess::Enabled,
    };
    Ok(FullPolicy { base, grants, denied_globs, network })
}

/// One grant per path: on a tie, `none` beats `write`, and `write` beats `read`. A grant
/// that must exist beats one that may be skipped.
fn add_grant(grants: &mut Vec<Grant>, grant: Grant) {
    match grants.iter_mut().find(|g| g.path == grant.path) {
        Some(existing) => {
            if grant.access > existing.access {
                *existing = grant;
            } else if grant.access == existing.access {
                existing.skip_if_missing &= grant.skip_if_missing;
            }
        }
        None => grants.push(grant),
    }
}

/// `policyContext.workspaceRoots` if given, else `workspaceRoots`; no fallback to the cwd.
fn project_roots(intent: &SandboxContext) -> Result<Vec<PathBuf>, PolicyError> {
    let roots = intent
        .policy_context
        .as_ref()
        .and_then(|p| p.workspace_roots.as_ref())
        .or(intent.workspace_roots.as_ref());
    roots.into_iter().flatten().map(native).collect()
}

/// The absolute path a `file:` URI names here; a URI that names no Linux path (a Windows drive,
/// another host) is refused.
fn native(uri: &PathUri) -> Result<PathBuf, PolicyError> {
    let invalid = || PolicyError::InvalidPath(uri.to_string());
    let path = uri.to_path().map_err(|_| invalid())?;
    let windows_drive = path
        .components()
        .nth(1)
        .and_then(|c| c.as_os_str().to_str())
        .is_some_and(|first| first.len() == 2 && first.ends_with(':'));
    if windows_drive {
        return Err(invalid());
    }
    Ok(normalise(&path))
}

/// `.` and `..` worked out lexically, so every grant names the path the kernel will see, and
/// two spellings of one path tie.
fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::ParentDir => {
                out.pop();
            }
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn special(kind: &str, access: &str) -> Value {
        json!({"path": {"type": "special", "value": {"kind": kind}}, "access": access})
    }

    /// Codex's workspace-write intent for `/w` (sandbox.md §1).
    fn workspace_write() -> Value {
        let mut entries = vec![
            special("root", "read"),
            special("project_roots", "write"),
            special("slash_tmp", "write"),
            special("tmpdir", "write"),
        ];
        for name in PROTECTED_NAMES {
            entries.push(json!({"path": {"type": "special",
                "value": {"kind": "project_roots", "subpath": name}},
                "access": "read", "missing_path_behavior": "skip"}));
        }
        intent(json!({"type": "restricted", "entries": entries}), "restricted")
    }

    fn intent(file_system: Value, network: &str) -> Value {
        json!({"permissions": {"type": "managed", "file_system": file_system, "network": network},
            "cwd": "file:///w", "workspaceRoots": ["file:///w"], "windowsSandboxLevel": "disabled"})
    }

    fn resolve_json(intent: Value, tmpdir: Option<&str>) -> Result<Confinement, PolicyError> {
        let intent: SandboxContext = serde_json::from_value(intent).unwrap();
        let context = Context { request_cwd: Path::new("/req"), tmpdir, slash_tmp_is_dir: true };
        resolve(&intent, context)
    }

    fn full(intent: Value, tmpdir: Option<&str>) -> FullPolicy {
        match resolve_json(intent, tmpdir).unwrap() {
            Confinement::Full(policy) => policy,
            other => panic!("a full sandbox, got {other:?}"),
        }
    }

    fn grant(path: &str, access: GrantAccess) -> (PathBuf, GrantAccess) {
        (PathBuf::from(path), access)
    }

    fn grants(policy: &FullPolicy) -> Vec<(PathBuf, GrantAccess)> {
        policy.grants.iter().map(|g| (g.path.clone(), g.access)).collect()
    }

    #[test]
    fn workspace_write_grants_the_roots_and_keeps_protected_names_read_only() {
        let policy = full(workspace_write(), Some("/var/tmp/t"));
        assert_eq!(policy.base, Base::Root);
        assert_eq!(policy.network, NetworkAccess::Restricted);
        use GrantAccess::*;
        assert_eq!(
            grants(&policy),
            vec![
                grant("/w", Write),
                grant("/tmp", Write),
                grant("/w/.git", Read),
                grant("/w/.agents", Read),
                grant("/w/.codex", Read),
                grant("/w/.aws", Read),
                grant("/var/tmp/t", Write),
            ]
        );
        assert!(policy.grants[2].skip_if_missing && !policy.grants[0].skip_if_missing);
        assert!(policy.reads_everything());
    }

    #[test]
    fn read_only_is_root_readable_and_nothing_writable() {
        let read_only = intent(
            json!({"type": "restricted", "entries": [special("root", "read")]}),
            "restricted",
        );
        let policy = full(read_only, None);
        assert_eq!((policy.base, policy.grants.len()), (Base::Root, 0));
    }

    #[test]
    fn project_roots_come_from_the_policy_context_first_and_never_from_the_cwd() {
        let mut with_context = workspace_write();
        with_context["policyContext"] = json!({"workspaceRoots": ["file:///p"]});
        assert_eq!(full(with_context, None).grants[0].path, PathBuf::from("/p"));

        let mut no_roots = workspace_write();
        no_roots.as_object_mut().unwrap().remove("workspaceRoots");
        let policy = full(no_roots, None);
        assert!(
            policy.grants.iter().all(|g| !g.path.starts_with("/w") && !g.path.starts_with("/req"))
        );
        assert_eq!(grants(&policy), vec![grant("/tmp", GrantAccess::Write)]);
    }

    #[test]
    fn the_cwd_kind_is_the_sandbox_cwd_then_the_requests() {
        let entries = json!({"type": "restricted", "entries": [
            special("root", "read"), special("current_working_directory", "write")]});
        assert_eq!(
            full(intent(entries.clone(), "enabled"), None).grants[0].path,
            PathBuf::from("/w")
        );
        let mut no_cwd = intent(entries, "enabled");
        no_cwd.as_object_mut().unwrap().remove("cwd");
        assert_eq!(full(no_cwd, None).grants[0].path, PathBuf::from("/req"));
    }

    #[test]
    fn tmpdir_is_the_childs_and_means_nothing_when_unset_or_empty() {
        for tmpdir in [None, Some("")] {
            let policy = full(workspace_write(), tmpdir);
            assert!(policy.grants.iter().all(|g| g.path != Path::new("")), "{tmpdir:?}");
            assert_eq!(policy.writable_roots().count(), 2, "{tmpdir:?}");
        }
    }

    #[test]
    fn ties_go_to_none_then_write_then_read_and_the_most_specific_path_is_mounted_last() {
        let entries = json!({"type": "restricted", "entries": [
            special("root", "read"),
            {"path": {"type": "path", "path": "file:///w/a/b"}, "access": "read"},
            {"path": {"type": "path", "path": "file:///w"}, "access": "write"},
            {"path": {"type": "path", "path": "file:///w/./x/../a/b"}, "access": "write"},
            {"path": {"type": "path", "path": "file:///w/s"}, "access": "deny"},
            {"path": {"type": "path", "path": "file:///w/s"}, "access": "write"},
        ]});
        let (write, none) = (GrantAccess::Write, GrantAccess::None);
        assert_eq!(
            grants(&full(intent(entries, "restricted"), None)),
            vec![grant("/w", write), grant("/w/s", none), grant("/w/a/b", write)]
        );
    }

    /// A project root of `/` makes everything readable (the base) and `/` writable over it.
    #[test]
    fn a_writable_slash_is_readable_too() {
        let mut intent = workspace_write();
        intent["workspaceRoots"] = json!(["file:///"]);
        let policy = full(intent, None);
        assert_eq!(policy.base, Base::Root);
        assert_eq!(grants(&policy)[0], grant("/", GrantAccess::Write));
        assert!(policy.reads_everything());
    }

    #[test]
    fn confinement_by_intent() {
        let cases = [
            (json!({"type": "disabled"}), Confinement::Unconfined),
            (json!({"type": "external", "network": "enabled"}), Confinement::Unconfined),
            (json!({"type": "external", "network": "restricted"}), Confinement::NetworkFilter),
            (
                json!({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "enabled"}),
                Confinement::Unconfined,
            ),
            (
                json!({"type": "managed", "file_system": {"type": "unrestricted"}, "network": "restricted"}),
                Confinement::NetworkFilter,
            ),
            (
                json!({"type": "managed", "network": "restricted", "file_system": {"type": "restricted",
                    "entries": [special("root", "write")]}}),
                Confinement::NetworkFilter,
            ),
        ];
        for (permissions, expected) in cases {
            let intent = json!({"permissions": permissions, "windowsSandboxLevel": "disabled"});
            assert_eq!(resolve_json(intent.clone(), None).unwrap(), expected, "{intent}");
        }
        let mut landlock = workspace_write();
        landlock["useLegacyLandlock"] = json!(true);
        assert_eq!(resolve_json(landlock, None).unwrap(), Confinement::LegacyLandlock);
    }

    #[test]
    fn minimal_and_none_take_away_reading_everything() {
        let entries = json!({"type": "restricted", "entries": [
            special("minimal", "read"), special("current_working_directory", "write")]});
        let policy = full(intent(entries, "enabled"), None);
        assert_eq!(policy.base, Base::Minimal);
        assert!(!policy.reads_everything());
        let hidden = json!({"type": "restricted", "entries": [special("root", "read"),
            {"path": {"type": "glob_pattern", "pattern": "/w/**/*.key"}, "access": "none"}]});
        let policy = full(intent(hidden, "enabled"), None);
        assert_eq!(policy.denied_globs, vec!["/w/**/*.key".to_string()]);
        assert!(!policy.reads_everything());
    }

    #[test]
    fn windows_paths_are_refused_in_the_references_words() {
        let entries = json!({"type": "restricted", "entries": [
            {"path": {"type": "path", "path": "file:///C:/x"}, "access": "read"}]});
        assert_eq!(
            resolve_json(intent(entries, "enabled"), None).unwrap_err().to_string(),
            "invalid sandbox permission path: 'file:///C:/x' is invalid on 'linux'"
        );
    }
}
