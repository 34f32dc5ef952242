//! The API operations on one step's object: create exactly once (adopting an object of our name only when its
//! identity is ours), delete in the foreground, events of the object and its pods.

use kube::api::{DeleteParams, DynamicObject, PostParams};

use super::client::{bare, describe, error, status_code};
use super::manifest::IDENTITY;
use super::plan::Step;
use super::{events, Kubernetes};
use crate::systems::SystemError;
use crate::{info, warn};

impl Kubernetes {
    /// Creates the step's object; a 409 adopts it only when it carries our identity.
    pub(super) async fn create_object(&self, step: &Step) -> Result<(), SystemError> {
        // what runs in the object once it is up must be here before the servers spend minutes starting
        if let Some(own) = &step.spec.own {
            let script = &own.run.bench.script;
            if let Err(why) = std::fs::metadata(script) {
                let e = super::exec::BenchError::Script {
                    path: script.clone(),
                    why,
                };
                return Err(SystemError::refused(format!(
                    "{} {} not created: {e}",
                    step.spec.kind_name(),
                    step.name
                )));
            }
        }
        let c = self.conn().await?;
        c.cache().watch(&step.spec);
        let api = self.object_api(c, &step.spec);
        let obj: DynamicObject =
            serde_json::from_value(step.spec.manifest.clone()).map_err(|e| {
                format!(
                    "internal error: manifest of {} is not an object: {e}",
                    step.name
                )
            })?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {
                info!(
                    "Created Kubernetes {} {}/{}",
                    step.spec.kind_name(),
                    self.ns(),
                    step.name
                );
                Ok(())
            }
            Err(e) if status_code(&e) == Some(409) => match self.adopt_object(step).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!(
                    "{} {} was refused as a duplicate but cannot be found",
                    step.spec.kind_name(),
                    step.name
                )
                .into()),
                Err(e) => Err(e),
            },
            Err(e) if status_code(&e) == Some(404) && step.spec.operator().is_some() => {
                let r = step.spec.resource();
                let (_, operator) = step.spec.operator().unwrap_or_default();
                Err(format!(
                    "cannot create {} {}: the API server at {} does not serve {} {}s ({}); install {operator} \
                     (its CRD) in the cluster",
                    r.kind,
                    step.name,
                    c.server,
                    r.api_version,
                    r.kind,
                    describe(&e)
                )
                .into())
            }
            Err(e) => Err(SystemError::new(
                super::client::kind(&e).creating(),
                format!(
                    "cannot create {} {}/{} at {}: {}",
                    step.spec.kind_name(),
                    self.ns(),
                    step.name,
                    c.server,
                    describe(&e)
                ),
            )),
        }
    }

    /// Whether the step's object exists and is ours; an error when an object of that name belongs to something
    /// else.
    pub(super) async fn adopt_object(&self, step: &Step) -> Result<bool, SystemError> {
        let c = self.conn().await?;
        c.cache().watch(&step.spec);
        let api = self.object_api(c, &step.spec);
        let obj = match api.get_opt(&step.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(false),
            Err(e) => {
                return Err(error(
                    &e,
                    &format!("cannot look up {} {}", step.spec.kind_name(), step.name),
                ))
            }
        };
        let theirs = obj
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(IDENTITY))
            .cloned();
        if theirs.as_deref() == Some(step.identity.as_str()) {
            return Ok(true);
        }
        Err(format!(
            "namespace {} already has a {} named {} that this run did not create (its {IDENTITY} is {}, ours {}); \
             not adopting it: delete it or change the test id",
            self.ns(),
            step.spec.kind_name(),
            step.name,
            theirs.as_deref().unwrap_or("missing"),
            step.identity
        )
        .into())
    }

    /// Asks for the object's deletion in the foreground (its pods go first); the machine confirms it is gone.
    pub(super) async fn delete_object(&self, step: &Step) -> Result<(), SystemError> {
        let c = self.conn().await?;
        let api = self.object_api(c, &step.spec);
        match api.delete(&step.name, &DeleteParams::foreground()).await {
            Ok(_) => Ok(()),
            Err(e) if status_code(&e) == Some(404) => Ok(()),
            Err(e) => Err(bare(&e)),
        }
    }

    /// Whether the object is gone (its deletion finished); an error when the server cannot say.
    pub(super) async fn object_gone(&self, step: &Step) -> Result<bool, SystemError> {
        let c = self.conn().await?;
        let api = self.object_api(c, &step.spec);
        match api.get_opt(&step.name).await {
            Ok(None) => Ok(true),
            Ok(Some(_)) => Ok(false),
            // a role may grant list without get: the same answer, by name
            Err(e) if status_code(&e) == Some(403) => {
                let by_name = kube::api::ListParams::default()
                    .fields(&format!("metadata.name={}", step.name));
                match api.list(&by_name).await {
                    Ok(l) => Ok(l.items.is_empty()),
                    Err(_) => Err(bare(&e)),
                }
            }
            Err(e) => Err(bare(&e)),
        }
    }

    /// `events.txt` of the step from the object's and its pods' events; the last event, for messages.
    pub(super) async fn write_events(&self, step: &Step) -> Option<String> {
        let Ok(c) = self.conn().await else {
            return None;
        };
        let mut names = vec![step.name.clone()];
        names.extend(
            c.cache()
                .pods(&step.name)
                .await
                .iter()
                .map(|p| super::state::name(p).to_string()),
        );
        let api = kube::Api::namespaced(c.client.clone(), self.ns());
        let last = events::write(&api, &names, &step.dir).await;
        if last.is_none() {
            warn!(
                "No Kubernetes events for {} {}",
                step.spec.kind_name(),
                step.name
            );
        }
        last
    }
}
