//! Generated gRPC code of the kubelet's plugin APIs (see `proto/README.md`). The module paths
//! follow the proto packages, which are the names on the wire.
#![allow(
    missing_docs,
    clippy::all,
    clippy::pedantic,
    missing_debug_implementations
)]

/// Device plugin API v1beta1: `v1beta1.Registration` (served by the kubelet) and
/// `v1beta1.DevicePlugin` (served by the plugin).
pub mod deviceplugin {
    tonic::include_proto!("v1beta1");
}

/// Plugin registration (`pluginregistration.Registration`), served by the plugin on a socket in
/// the kubelet's plugins_registry directory.
pub mod pluginregistration {
    tonic::include_proto!("pluginregistration");
}

/// DRA kubelet plugin service, both versions the kubelet speaks.
pub mod dra {
    pub mod v1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1");
    }
    pub mod v1beta1 {
        tonic::include_proto!("k8s.io.kubelet.pkg.apis.dra.v1beta1");
    }
}

/// The kubelet's PodResources API v1 (`v1.PodResourcesLister`, served by the kubelet), List only:
/// which devices the kubelet gave each container.
pub mod podresources {
    tonic::include_proto!("v1");
}
