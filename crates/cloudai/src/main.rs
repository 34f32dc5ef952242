fn main() {
    std::process::exit(cloudai::cli::main());
}
