//! Request validation against the official OpenAPI document (the subset in openapi/openapi-subset.json):
//! `$ref`, `allOf`, types, `nullable`, `required`, `enum`, `minLength`/`maxLength`, `minimum`/`maximum`,
//! `format: uuid`, `items`, and unknown fields. `pattern`s are not evaluated (in this subset they are `.*`).

use serde_json::Value;

const SUBSET: &str = include_str!("../openapi/openapi-subset.json");

/// A `complianceIssues` item of `SubmissionErrorV2`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Issue {
    pub field: String,
    pub details: String,
    pub rule: Option<&'static str>,
}

pub struct Schemas {
    doc: Value,
}

impl Default for Schemas {
    fn default() -> Self {
        Self {
            doc: serde_json::from_str(SUBSET).expect("embedded OpenAPI subset is valid JSON"),
        }
    }
}

fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                *c == b'-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

impl Schemas {
    pub fn schema(&self, name: &str) -> &Value {
        &self.doc["components"]["schemas"][name]
    }

    fn resolve<'a>(&'a self, s: &'a Value) -> &'a Value {
        match s.get("$ref").and_then(Value::as_str) {
            Some(r) => self.resolve(self.schema(r.rsplit('/').next().unwrap_or(""))),
            None => s,
        }
    }

    /// Every property an object schema declares, following `allOf`.
    fn properties<'a>(
        &'a self,
        s: &'a Value,
        out: &mut Vec<(&'a str, &'a Value)>,
        required: &mut Vec<&'a str>,
    ) {
        let s = self.resolve(s);
        if let Some(p) = s.get("properties").and_then(Value::as_object) {
            out.extend(p.iter().map(|(k, v)| (k.as_str(), v)));
        }
        if let Some(r) = s.get("required").and_then(Value::as_array) {
            required.extend(r.iter().filter_map(Value::as_str));
        }
        for sub in s
            .get("allOf")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            self.properties(sub, out, required);
        }
    }

    pub fn validate(&self, value: &Value, schema_name: &str) -> Vec<Issue> {
        let mut issues = Vec::new();
        self.check(value, self.schema(schema_name), "", &mut issues);
        issues
    }

    fn check(&self, v: &Value, s: &Value, path: &str, out: &mut Vec<Issue>) {
        let s = self.resolve(s);
        let issue = |details: String, rule: Option<&'static str>| Issue {
            field: path.to_string(),
            details,
            rule,
        };
        if v.is_null() {
            if !s.get("nullable").and_then(Value::as_bool).unwrap_or(false)
                && s.get("type").is_some()
            {
                out.push(issue("must not be null".into(), Some("required")));
            }
            return;
        }
        let has_props = s.get("properties").is_some() || s.get("allOf").is_some();
        let ty =
            s.get("type")
                .and_then(Value::as_str)
                .or(if has_props { Some("object") } else { None });
        let ok = match ty {
            Some("string") => v.is_string(),
            Some("integer") => v.is_i64() || v.is_u64(),
            Some("number") => v.is_number(),
            Some("boolean") => v.is_boolean(),
            Some("array") => v.is_array(),
            Some("object") => v.is_object(),
            _ => true,
        };
        if !ok {
            out.push(issue(
                format!("must be of type {}", ty.unwrap_or("?")),
                None,
            ));
            return;
        }
        if let Some(e) = s.get("enum").and_then(Value::as_array) {
            if !e.contains(v) {
                let opts: Vec<String> = e
                    .iter()
                    .filter(|x| !x.is_null())
                    .map(|x| x.to_string())
                    .collect();
                out.push(issue(
                    format!("value must be one of {}", opts.join(", ")),
                    Some("options"),
                ));
            }
        }
        if let Some(st) = v.as_str() {
            let n = st.chars().count() as u64;
            if s.get("minLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n < m)
            {
                out.push(issue(
                    format!("must be at least {} characters", s["minLength"]),
                    Some("min"),
                ));
            }
            if s.get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                out.push(issue(
                    format!("must be at most {} characters", s["maxLength"]),
                    Some("max"),
                ));
            }
            if s.get("format").and_then(Value::as_str) == Some("uuid") && !is_uuid(st) {
                out.push(issue("must be a uuid".into(), None));
            }
        }
        if let Some(x) = v.as_f64() {
            if s.get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| x < m)
            {
                out.push(issue(
                    format!("value must be no less than {}", s["minimum"]),
                    Some("min"),
                ));
            }
            if s.get("maximum")
                .and_then(Value::as_f64)
                .is_some_and(|m| x > m)
            {
                out.push(issue(
                    format!("value must be no more than {}", s["maximum"]),
                    Some("max"),
                ));
            }
        }
        if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
            for (i, it) in arr.iter().enumerate() {
                self.check(it, items, &format!("{path}[{i}]"), out);
            }
        }
        if let Some(obj) = v.as_object() {
            let (mut props, mut required) = (Vec::new(), Vec::new());
            self.properties(s, &mut props, &mut required);
            let join = |k: &str| {
                if path.is_empty() {
                    k.to_string()
                } else {
                    format!("{path}.{k}")
                }
            };
            for r in required {
                if !obj.contains_key(r) {
                    out.push(Issue {
                        field: join(r),
                        details: "is required".into(),
                        rule: Some("required"),
                    });
                }
            }
            let additional = s.get("additionalProperties");
            for (k, val) in obj {
                match props.iter().find(|(n, _)| *n == k) {
                    Some((_, ps)) => self.check(val, ps, &join(k), out),
                    None => match additional {
                        Some(Value::Object(a)) if !a.is_empty() => {
                            self.check(val, additional.unwrap(), &join(k), out)
                        }
                        Some(Value::Bool(true)) | Some(Value::Object(_)) => {}
                        _ if props.is_empty() => {}
                        _ => out.push(Issue {
                            field: join(k),
                            details: "is not a known field".into(),
                            rule: None,
                        }),
                    },
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validates_creation_requests() {
        let s = Schemas::default();
        let ok = json!({"name": "a", "projectId": "1", "clusterId": "71f69d83-ba66-4822-adf5-55ce55efd210",
            "spec": {"command": "x", "args": "--a 1", "image": "img", "compute": {"gpuDevicesRequest": 8},
                     "parallelism": 1, "environmentVariables": [{"name": "A", "value": "1"}]}});
        assert_eq!(s.validate(&ok, "TrainingCreationRequest"), vec![]);
        let bad = json!({"name": "", "projectId": "1", "clusterId": "nope", "spec": {"compute": {"gpuDevicesRequest": "8"}, "bogus": 1}});
        let issues = s.validate(&bad, "TrainingCreationRequest");
        let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
        assert!(
            fields.contains(&"name") && fields.contains(&"clusterId"),
            "{issues:?}"
        );
        assert!(
            fields.contains(&"spec.compute.gpuDevicesRequest") && fields.contains(&"spec.bogus"),
            "{issues:?}"
        );
        let dist = json!({"name": "d", "projectId": "1", "clusterId": "71f69d83-ba66-4822-adf5-55ce55efd210",
            "masterSpecSameAsWorker": false, "masterSpec": {"command": "mpirun"},
            "spec": {"distributedFramework": "MPI", "numWorkers": 2, "slotsPerWorker": 8}});
        assert_eq!(s.validate(&dist, "DistributedCreationRequest"), vec![]);
        let wrong = json!({"name": "d", "projectId": "1", "clusterId": "71f69d83-ba66-4822-adf5-55ce55efd210", "spec": {"distributedFramework": "mpi"}});
        assert_eq!(
            s.validate(&wrong, "DistributedCreationRequest")[0].rule,
            Some("options")
        );
        assert!(!s
            .validate(
                &json!({"grantType": "app_token", "AppId": "x"}),
                "TokenRequest"
            )
            .is_empty());
    }
}
