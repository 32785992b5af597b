//! Writes. Every object fakegpu changes goes through server-side apply with one field manager
//! ([`FIELD_MANAGER`]), so the API server tracks exactly which fields fakegpu owns and drops
//! them when fakegpu stops applying them. Callers compare with the cache first: a call here is a
//! write, and a resync with nothing changed makes none.

use fakegpu_api::names::FIELD_MANAGER;
use kube::{
    Api,
    api::{DeleteParams, Patch, PatchParams},
};
use serde::{Serialize, de::DeserializeOwned};

use crate::Result;

fn params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Server-side applies `object` (a partial object: only the fields fakegpu owns).
pub async fn apply<K>(
    api: &Api<K>,
    name: &str,
    object: &(impl Serialize + std::fmt::Debug),
) -> Result<K>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(api.patch(name, &params(), &Patch::Apply(object)).await?)
}

/// Server-side applies the status subresource.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    object: &(impl Serialize + std::fmt::Debug),
) -> Result<K>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .patch_status(name, &params(), &Patch::Apply(object))
        .await?)
}

/// Deletes an object; one that is already gone counts as deleted.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
}
