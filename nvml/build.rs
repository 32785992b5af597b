//! The soname NVIDIA's components load the library by (go-nvml dlopens `libnvidia-ml.so.1`).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libnvidia-ml.so.1");
}
