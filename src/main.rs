//! The `wai` binary: the library runs it ([`wai::run_main`]); only the allocator is chosen here.

// Reading rows allocates many small strings and maps from several threads at once; glibc's
// allocator spent about a third of a JSONL conversion in malloc and free. mimalloc does not.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    wai::run_main()
}
