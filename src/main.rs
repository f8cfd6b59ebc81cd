//! The `quantforge` binary: the command line of `cli`.

fn main() -> std::process::ExitCode {
    quantforge::cli::main()
}
