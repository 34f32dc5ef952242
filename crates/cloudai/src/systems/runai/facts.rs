//! The cluster and the project a Run:ai system names, read by id (large tenants: a list is only the fallback,
//! and then paged).

use serde_json::Value;

use super::client::{ApiError, Client};

/// `8-4-4-4-12` hexadecimal digits.
pub fn is_uuid(s: &str) -> bool {
    let parts: Vec<&str> = s.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// One object by its own path when the answer has `field`, else found in the paged list at `list` (a role may
/// list what it may not read by id); `None` when neither has it, with how many the list held.
async fn by_id_or_listed(
    c: &Client,
    one: &str,
    field: &str,
    list: (&str, &str),
    is_it: impl Fn(&Value) -> bool,
) -> Result<Result<Value, Vec<Value>>, String> {
    match c.call(reqwest::Method::GET, one, &[], None).await {
        Ok(v) if v[field].is_string() => return Ok(Ok(v)),
        Ok(_) | Err(ApiError::Status { .. }) => {}
        Err(e) => return Err(format!("cannot read {one}: {e}")),
    }
    let all = c
        .list_all(list.0, list.1, &[], false)
        .await
        .map_err(|e| format!("cannot list {}: {e}", list.0))?;
    Ok(all.iter().find(|v| is_it(v)).cloned().ok_or(all))
}

/// The project of that id: `GET /api/v1/org-unit/projects/{id}`, else found in the paged list.
pub async fn project(c: &Client, id: &str) -> Result<Value, String> {
    let found = by_id_or_listed(
        c,
        &format!("/api/v1/org-unit/projects/{id}"),
        "name",
        ("/api/v1/org-unit/projects", "projects"),
        |p| p["id"].as_str() == Some(id) || p["id"].as_u64().is_some_and(|n| n.to_string() == id),
    )
    .await?;
    found.map_err(|all| {
        format!(
            "project_id {id} is not among the {} projects these credentials see; check project_id (the Run:ai UI \
             shows it under Organization → Projects) and the application's roles",
            all.len()
        )
    })
}

/// The cluster of that UUID: `GET /api/v1/clusters/{uuid}`, else found in the list.
pub async fn cluster(c: &Client, uuid: &str) -> Result<Value, String> {
    let found = by_id_or_listed(
        c,
        &format!("/api/v1/clusters/{uuid}"),
        "uuid",
        ("/api/v1/clusters", "clusters"),
        |x| x["uuid"] == uuid,
    )
    .await?;
    found.map_err(|all| {
        format!(
            "cluster_id {uuid} is not among the {} clusters these credentials see ({})",
            all.len(),
            all.iter()
                .filter_map(|x| Some(format!("{} {}", x["uuid"].as_str()?, x["name"].as_str()?)))
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids() {
        assert!(super::is_uuid("71f69d83-ba66-4822-adf5-55ce55efd210"));
        for bad in [
            "",
            "my-cluster",
            "71f69d83ba664822adf555ce55efd210",
            "71f69d83-ba66-4822-adf5-55ce55efd21g",
        ] {
            assert!(!super::is_uuid(bad), "{bad}");
        }
    }
}
