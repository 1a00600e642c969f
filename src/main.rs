//! The `seckill` binary: everything lives in the library.

fn main() -> std::process::ExitCode {
    seckill::cli::main()
}
