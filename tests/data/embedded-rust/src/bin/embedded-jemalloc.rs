//! jemalloc compiled into the executable as the global allocator (the `tikv-jemallocator` crate).
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

include!("../workload.rs");
