//! The fast integration tests, built as one binary: real HTTP mirrors on
//! 127.0.0.1 with fault switches, the real proxy, real SQLite.

mod support;

mod access;
mod browse;
mod bundle;
mod cache;
mod commit;
mod composer;
mod conda;
mod config_check;
mod cran;
mod credentials_scope;
mod dashboard;
mod documents;
mod failover;
mod fanout;
mod guard;
mod hardening;
mod hardening_keys;
mod hex;
mod history;
mod huggingface;
mod integrity;
mod kinds;
mod learning;
mod lifetime;
mod maven;
mod metadata;
mod oci;
mod operations;
mod path_safety;
mod pins;
mod prune;
mod purge;
mod rate_limit;
mod registries;
mod reliability;
mod rpm;
mod rubygems;
mod s3;
mod scaleout;
mod security;
mod service;
mod supply_chain;
mod warm_ls;
