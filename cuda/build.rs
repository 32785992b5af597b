//! The soname the CUDA runtime loads the driver library by (`dlopen("libcuda.so.1")`).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
}
