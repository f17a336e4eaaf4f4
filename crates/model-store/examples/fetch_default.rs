//! Fetches the default model into the cache (used to check the fetch path by hand).
fn main() {
    match specdec_model_store::fetch(&specdec_model_store::DEFAULT_MODEL, false) {
        Ok(p) => println!("{}", p.display()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
