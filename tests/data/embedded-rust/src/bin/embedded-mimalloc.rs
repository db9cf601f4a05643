//! mimalloc compiled into the executable as the global allocator (the `mimalloc` crate).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

include!("../workload.rs");
