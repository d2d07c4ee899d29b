//! Rebuilds the crate when a migration is added or changed, so that
//! `sqlx::migrate!` embeds it (the macro alone does not watch the folder).

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
