//! The operator's errors: what can fail in a reconcile.

/// Everything that can fail in a reconcile. Operator-side problems with a pool's content are not
/// errors: they become status conditions (see [`crate::pool`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("topology document: {0}")]
    Topology(#[from] fakegpu_model::topology::TopologyError),
    #[error("pool finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    /// Short label for counting failures by kind.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Self::Kube(_) => "kube",
            Self::Topology(_) => "topology",
            Self::Finalizer(_) => "finalizer",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
