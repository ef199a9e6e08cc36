//! The pull half's statements: [`window`] (the incremental commit window
//! over the `sync_change_scopes` inverted index, partition bounds) and
//! [`bootstrap_page`] (one snapshot page of an app table, keyset-paged).

pub mod bootstrap_page;
pub mod window;
