fn main() -> std::process::ExitCode {
    quantforge::cli::main()
}
