//! Writes as the API server saw them, from its audit log: the one count that is the same
//! whichever implementation made them, so the scale benchmark can put fakegpu and another
//! implementation side by side. hack/cluster.sh's policy logs every write with its metadata
//! and, for service accounts outside `kube-system` (where an implementation under test runs;
//! the controller manager's accounts are in `kube-system`), the request body too.

use std::{
    fs::File,
    io::{BufRead, BufReader, Seek, SeekFrom},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use anyhow::Context;
use k8s_openapi::jiff::Timestamp;

/// One write request an implementation under test made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub user: String,
    /// `create`, `update`, `patch`, `delete`, ...
    pub verb: String,
    pub resource: String,
    pub name: String,
    pub subresource: Option<String>,
    /// The request body's size as the audit log records it (compact JSON).
    pub body_bytes: usize,
    /// When the API server answered it.
    pub completed: Option<Timestamp>,
}

impl Write {
    /// `verb resource[/subresource]`: the kind of write, whichever object.
    pub fn kind(&self) -> String {
        self.describe(None)
    }

    /// `verb resource/name[/subresource]`: this write.
    pub fn target(&self) -> String {
        self.describe(Some(&self.name))
    }

    fn describe(&self, name: Option<&str>) -> String {
        let mut text = format!("{} {}", self.verb, self.resource);
        for part in name.into_iter().chain(self.subresource.as_deref()) {
            text.push('/');
            text.push_str(part);
        }
        text
    }
}

/// Group every service account is in, and the one of the control plane's own.
const SERVICE_ACCOUNTS: &str = "system:serviceaccounts";
const CONTROL_PLANE_ACCOUNTS: &str = "system:serviceaccounts:kube-system";

/// The write an audit line records, if it is a completed write by a service account outside
/// `kube-system` and not a lease renewal (leader election's heartbeat, every 2 s whatever
/// the load, is not reconcile work).
pub fn implementation_write(line: &str) -> Option<Write> {
    implementation_entry(line).map(|(write, _)| write)
}

/// An implementation's write as it was sent: what `hack/bench/scale.sh` captures of fakegpu's
/// first pass for `replay` to send again.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct Request {
    pub verb: String,
    /// Path and query, as the client sent them.
    pub uri: String,
    /// The body as the API server logged it (compact JSON; for a patch, the patch).
    pub body: Box<serde_json::value::RawValue>,
}

/// [`implementation_write`]'s write and the request behind it, when the log has its body.
pub fn implementation_request(line: &str) -> Option<(Write, Request)> {
    let (write, entry) = implementation_entry(line)?;
    let request = Request {
        verb: write.verb.clone(),
        uri: entry.request_uri?,
        body: entry.request_object?,
    };
    Some((write, request))
}

fn implementation_entry(line: &str) -> Option<(Write, Entry)> {
    if !line.contains(SERVICE_ACCOUNTS) || !line.contains("ResponseComplete") {
        return None;
    }
    // Typed, with the request body left as text: the scale benchmark reads tens of thousands
    // of these while the cluster converges, and parsing every body into a tree cost the driver
    // more CPU than anything else it did.
    let mut entry: Entry = serde_json::from_str(line).ok()?;
    if entry.stage != "ResponseComplete" {
        return None;
    }
    let in_group = |group: &str| entry.user.groups.iter().any(|g| g == group);
    if !in_group(SERVICE_ACCOUNTS) || in_group(CONTROL_PLANE_ACCOUNTS) {
        return None;
    }
    let object = entry.object_ref.take()?;
    let resource = object.resource?;
    if resource == "leases" {
        return None;
    }
    let write = Write {
        user: entry.user.username.take()?,
        verb: entry.verb.take()?,
        resource,
        name: object.name.unwrap_or_default(),
        subresource: object.subresource,
        body_bytes: entry
            .request_object
            .as_ref()
            .map_or(0, |body| body.get().len()),
        completed: entry
            .stage_timestamp
            .as_deref()
            .and_then(|t| t.parse().ok()),
    };
    Some((write, entry))
}

/// What [`implementation_write`] reads of an audit event (audit.k8s.io/v1 `Event`).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(default)]
    stage: String,
    verb: Option<String>,
    #[serde(default)]
    user: User,
    object_ref: Option<AuditObject>,
    /// Path and query.
    #[serde(rename = "requestURI")]
    request_uri: Option<String>,
    /// As the API server logged it: compact JSON, so its length is the body's.
    request_object: Option<Box<serde_json::value::RawValue>>,
    /// RFC 3339 with microseconds.
    stage_timestamp: Option<String>,
}

#[derive(Default, serde::Deserialize)]
struct User {
    username: Option<String>,
    #[serde(default)]
    groups: Vec<String>,
}

#[derive(serde::Deserialize)]
struct AuditObject {
    resource: Option<String>,
    name: Option<String>,
    subresource: Option<String>,
}

/// Follows the audit log from a point on, across the API server's rotations (it renames the
/// full file and starts a new one; the handle kept on the old one reads it to its end first).
#[derive(Debug)]
pub struct AuditTail {
    path: PathBuf,
    reader: Option<(BufReader<File>, u64)>,
    /// A line the API server had not finished writing at the last poll.
    partial: String,
}

impl AuditTail {
    /// Starts at the log's current end: only writes from now on are seen.
    pub fn from_now(path: &Path) -> anyhow::Result<Self> {
        let mut tail = Self {
            path: path.to_owned(),
            reader: None,
            partial: String::new(),
        };
        if let Some((mut file, inode)) = tail.open()? {
            file.seek(SeekFrom::End(0))?;
            tail.reader = Some((BufReader::new(file), inode));
        }
        Ok(tail)
    }

    fn open(&self) -> anyhow::Result<Option<(File, u64)>> {
        match File::open(&self.path) {
            Ok(file) => {
                let inode = file.metadata()?.ino();
                Ok(Some((file, inode)))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(error).with_context(|| format!("opening {}", self.path.display())),
        }
    }

    /// The implementation writes logged since the last poll.
    pub fn poll(&mut self) -> anyhow::Result<Vec<Write>> {
        let mut writes = Vec::new();
        loop {
            if let Some((reader, _)) = &mut self.reader {
                loop {
                    let read = reader.read_line(&mut self.partial)?;
                    if read == 0 {
                        break;
                    }
                    if self.partial.ends_with('\n') {
                        writes.extend(implementation_write(&self.partial));
                        self.partial.clear();
                    }
                }
            }
            // At the end of the file we hold: if the path names another file now, the log
            // rotated and the rest is there.
            let current = self.reader.as_ref().map(|(_, inode)| *inode);
            match self.open()? {
                Some((file, inode)) if Some(inode) != current => {
                    self.partial.clear();
                    self.reader = Some((BufReader::new(file), inode));
                }
                _ => return Ok(writes),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn line(user: &str, groups: &[&str], resource: &str, body: Option<&str>) -> String {
        let mut entry = serde_json::json!({
            "stage": "ResponseComplete", "verb": "patch",
            "user": {"username": user, "groups": groups},
            "objectRef": {"resource": resource, "name": "n1", "subresource": "status"},
            "stageTimestamp": "2026-12-06T05:13:23.382705Z",
        });
        if let Some(body) = body {
            entry["requestObject"] = serde_json::from_str(body).unwrap();
        }
        format!("{entry}\n")
    }

    const OPERATOR: &str = "system:serviceaccount:fakegpu-system:fakegpu-operator";
    const OPERATOR_GROUPS: [&str; 2] = [
        "system:serviceaccounts",
        "system:serviceaccounts:fakegpu-system",
    ];

    #[test]
    fn only_an_implementation_s_writes_count() {
        let write = implementation_write(&line(
            OPERATOR,
            &OPERATOR_GROUPS,
            "nodes",
            Some(r#"{"a": 1}"#),
        ))
        .unwrap();
        assert_eq!(write.user, OPERATOR);
        assert_eq!(write.resource, "nodes");
        assert_eq!(write.subresource.as_deref(), Some("status"));
        assert_eq!(write.body_bytes, r#"{"a":1}"#.len());
        assert_eq!(
            write.completed.map(|t| t.as_microsecond()),
            Some(1_796_534_003_382_705)
        );
        assert_eq!(write.kind(), "patch nodes/status");
        assert_eq!(write.target(), "patch nodes/n1/status");

        let kcm = [
            "system:serviceaccounts",
            "system:serviceaccounts:kube-system",
        ];
        assert_eq!(
            implementation_write(&line(
                "system:serviceaccount:kube-system:x",
                &kcm,
                "pods",
                None
            )),
            None
        );
        assert_eq!(
            implementation_write(&line("admin", &["system:masters"], "nodes", None)),
            None
        );
        assert_eq!(
            implementation_write(&line(OPERATOR, &OPERATOR_GROUPS, "leases", None)),
            None
        );
        assert_eq!(
            implementation_write("not json with system:serviceaccounts ResponseComplete"),
            None
        );
    }

    #[test]
    fn a_request_keeps_its_uri_and_body_as_sent() {
        let mut entry: serde_json::Value = serde_json::from_str(&line(
            OPERATOR,
            &OPERATOR_GROUPS,
            "nodes",
            Some(r#"{"metadata": {"labels": {"a": "b"}}}"#),
        ))
        .unwrap();
        entry["requestURI"] = "/api/v1/nodes/n1/status?fieldManager=fakegpu".into();
        let (write, request) = implementation_request(&entry.to_string()).unwrap();
        assert_eq!(write.target(), "patch nodes/n1/status");
        assert_eq!(request.verb, "patch");
        assert_eq!(request.uri, "/api/v1/nodes/n1/status?fieldManager=fakegpu");
        assert_eq!(request.body.get(), r#"{"metadata":{"labels":{"a":"b"}}}"#);

        entry.as_object_mut().unwrap().remove("requestObject");
        assert!(
            implementation_request(&entry.to_string()).is_none(),
            "a write logged without its body cannot be sent again"
        );
    }

    #[test]
    fn the_tail_sees_new_lines_once_across_a_rotation() {
        let dir = std::env::temp_dir().join(format!("fakegpu-audit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.log");
        let write = |file: &mut File, resource: &str| {
            let entry = line(OPERATOR, &OPERATOR_GROUPS, resource, None);
            file.write_all(entry.as_bytes()).unwrap();
        };
        let resources = |tail: &mut AuditTail| -> Vec<String> {
            tail.poll()
                .unwrap()
                .into_iter()
                .map(|w| w.resource)
                .collect()
        };
        let mut log = File::create(&path).unwrap();
        write(&mut log, "nodes");

        let mut tail = AuditTail::from_now(&path).unwrap();
        assert!(
            resources(&mut tail).is_empty(),
            "lines before the start are not seen"
        );

        // Half a line, then the rest: one write, seen when complete.
        let next = line(OPERATOR, &OPERATOR_GROUPS, "configmaps", None);
        let (head, rest) = next.split_at(20);
        log.write_all(head.as_bytes()).unwrap();
        assert!(resources(&mut tail).is_empty());
        log.write_all(rest.as_bytes()).unwrap();
        write(&mut log, "nodes");
        assert_eq!(resources(&mut tail), ["configmaps", "nodes"]);

        // Rotation: the old file gets one last line after the rename, the new one its own.
        std::fs::rename(&path, dir.join("audit-1.log")).unwrap();
        write(&mut log, "resourceslices");
        let mut fresh = File::create(&path).unwrap();
        write(&mut fresh, "events");
        assert_eq!(resources(&mut tail), ["resourceslices", "events"]);
        assert!(resources(&mut tail).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
