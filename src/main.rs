//! The `mirrorcache` command: `serve` and `check`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mirrorcache::config::Config;
use mirrorcache::server::Running;

#[derive(Parser)]
#[command(
    name = "mirrorcache",
    version,
    about = "A multi-mirror artifact caching reverse proxy"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy.
    Serve {
        /// The config file.
        #[arg(
            long,
            env = "MIRRORCACHE_CONFIG",
            default_value = "config/mirrorcache.toml"
        )]
        config: PathBuf,
    },
    /// Validate a config file: exit 0 if it is good, 2 with the key and line at fault if not.
    Check {
        #[arg(
            long,
            env = "MIRRORCACHE_CONFIG",
            default_value = "config/mirrorcache.toml"
        )]
        config: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => match Config::load(&config) {
            Ok(c) => {
                println!("{}: ok ({} remotes)", config.display(), c.remotes.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Serve { config } => {
            let config = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            init_logging();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .expect("tokio runtime");
            match runtime.block_on(serve(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let running = Running::start(&config).await?;
    shutdown_signal().await;
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

fn init_logging() {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .init();
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
