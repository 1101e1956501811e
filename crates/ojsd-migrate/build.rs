// `embed_migrations!` only sees the files that existed when this crate was last compiled;
// rebuild whenever the migrations folder changes so new files are picked up.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
