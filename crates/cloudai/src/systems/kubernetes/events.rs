//! `events.txt`: the Kubernetes events of a step's object and its pods (scheduling, image pulls, kills,
//! controller decisions), oldest first, one line each.

use std::path::Path;

use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams};

use super::client::describe;
use crate::warn;

fn line(e: &Event) -> (String, String) {
    let at = e
        .last_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
        .or_else(|| {
            e.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string())
        })
        .unwrap_or_default();
    let count = e
        .count
        .filter(|c| *c > 1)
        .map(|c| format!(" (x{c})"))
        .unwrap_or_default();
    let text = format!(
        "{at} {} {} {}/{}: {}{count}",
        e.type_.as_deref().unwrap_or("Normal"),
        e.reason.as_deref().unwrap_or(""),
        e.involved_object.kind.as_deref().unwrap_or(""),
        e.involved_object.name.as_deref().unwrap_or(""),
        e.message.as_deref().unwrap_or("").trim_end(),
    );
    (at, text)
}

/// Writes the events of the named objects into `events.txt` in `dir`; the last one's reason and message, for
/// the iteration's end reason.
pub async fn write(api: &Api<Event>, names: &[String], dir: &Path) -> Option<String> {
    let mut lines = Vec::new();
    let mut failures = Vec::new();
    for n in names {
        let lp = ListParams::default().fields(&format!("involvedObject.name={n}"));
        match api.list(&lp).await {
            Ok(list) => lines.extend(list.items.iter().map(line)),
            Err(e) => failures.push(format!("cannot list the events of {n}: {}", describe(&e))),
        }
    }
    lines.sort();
    lines.dedup();
    let mut text: String = lines.iter().map(|(_, l)| format!("{l}\n")).collect();
    for f in &failures {
        warn!("{f}");
        text.push_str(&format!("events unavailable: {f}\n"));
    }
    if text.is_empty() {
        text = format!("no Kubernetes events for {}\n", names.join(", "));
    }
    if let Err(e) = std::fs::create_dir_all(dir)
        .and_then(|_| crate::util::fsx::write_atomic(&dir.join("events.txt"), text.as_bytes()))
    {
        warn!("Cannot write {}: {e}", dir.join("events.txt").display());
    }
    lines
        .last()
        .map(|(_, l)| l.split_once(' ').map(|x| x.1).unwrap_or(l).to_string())
}

/// The newest Warning event of an object, as `<reason>: <message>` (a Job controller's `FailedCreate` when a quota
/// or an admission rule refuses its pods, an operator's complaint). None when there is none or it cannot be read.
pub(crate) async fn latest_warning(api: &Api<Event>, name: &str) -> Option<String> {
    let lp = ListParams::default().fields(&format!("involvedObject.name={name},type=Warning"));
    let list = api.list(&lp).await.ok()?;
    let newest = list.items.iter().max_by_key(|e| line(e).0)?;
    Some(format!(
        "{}: {}",
        newest.reason.as_deref().unwrap_or("Warning"),
        newest.message.as_deref().unwrap_or("").trim_end()
    ))
}
