//! The `mirrorcache` command: `serve`, `check`, `verify`, `ls`, `warm`, `export`, `import`, `token`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mirrorcache::config::{Config, LogConfig, LogFormat};
use mirrorcache::http::server::Running;

/// jemalloc, not glibc's allocator: the server allocates on its Tokio
/// workers, its blocking pool and SQLite's threads and frees elsewhere, and
/// glibc's per-thread arenas kept what was freed (BENCHMARKS.md, "Peak RSS").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

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
    /// Run the proxy. SIGHUP reloads the config; SIGINT/SIGTERM stop it gracefully.
    Serve {
        /// The config file.
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Validate a config file: exit 0 if it is good, 2 with the key and line at fault if not.
    Check {
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Re-hash every cached blob; report corrupt, missing and unreferenced ones.
    /// Exit 0 when clean (or cleaned with --remove), 1 when problems remain.
    Verify {
        #[command(flatten)]
        config: ConfigArg,
        /// Delete what is found: corrupt and unreferenced blobs, and the rows
        /// of corrupt or missing ones.
        #[arg(long)]
        remove: bool,
    },
    /// List cached entries (size, age, last access, hits) from the metadata
    /// database, all or those of REMOTE whose path starts with PREFIX.
    Ls {
        #[command(flatten)]
        config: ConfigArg,
        /// REMOTE or REMOTE/PREFIX.
        filter: Option<String>,
        /// A JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Fetch every artifact that lockfiles name through a running server
    /// (package-lock.json v2/v3, Cargo.lock, go.sum). Exit 1 if any failed,
    /// 2 if a lockfile cannot be read (then nothing is fetched).
    Warm {
        /// The server's base URL, e.g. http://127.0.0.1:8080.
        #[arg(long)]
        server: String,
        /// The remote the artifacts are fetched through.
        #[arg(long)]
        remote: String,
        /// Artifacts fetched at a time.
        #[arg(long, default_value_t = 8)]
        jobs: usize,
        /// Lockfiles; through a huggingface remote, snapshots `repo[@revision]`
        /// (every file of the revision's tree).
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write the selected cached entries (rows, blobs once each, declared
    /// digests) into one bundle (tar + zstd) for `import` on another cache.
    Export {
        #[command(flatten)]
        config: ConfigArg,
        /// The bundle file to write.
        #[arg(long)]
        out: PathBuf,
        /// Only entries fetched or revalidated this recently ("30d", "12h").
        #[arg(long, value_parser = humantime::parse_duration)]
        since: Option<std::time::Duration>,
        /// Sign the manifest with this ed25519 key (PKCS#8 PEM, as
        /// `openssl genpkey -algorithm ed25519` writes it).
        #[arg(long)]
        sign: Option<PathBuf>,
        /// REMOTE or REMOTE/PREFIX; none: every remote.
        select: Vec<String>,
    },
    /// Add a bundle's entries to this cache (beside a running server too):
    /// the signature and every blob's sha256 are checked before anything is
    /// added; entries already cached are kept. Exit 2 if refused.
    Import {
        #[command(flatten)]
        config: ConfigArg,
        /// The public key (PEM) the bundle must be signed with.
        #[arg(long)]
        verify_key: Option<PathBuf>,
        bundle: PathBuf,
    },
    /// Access tokens of `[auth]` users, kept (as hashes) in the metadata database.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// The OSV advisory feeds of `quarantine`.
    Advisories {
        #[command(subcommand)]
        command: AdvisoriesCommand,
    },
}

#[derive(Subcommand)]
enum AdvisoriesCommand {
    /// Check an OSV zip (an export carried to an offline site) and save it
    /// under the storage path as feed NAME (default: the only
    /// `[[advisories]]` feed, else "imported"); a running server reads it
    /// within seconds.
    Import {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        name: Option<String>,
        file: PathBuf,
    },
}

/// `--config`, as every subcommand takes it.
#[derive(clap::Args)]
struct ConfigArg {
    /// The config file.
    #[arg(
        long = "config",
        value_name = "CONFIG",
        env = "MIRRORCACHE_CONFIG",
        default_value = "config/mirrorcache.toml"
    )]
    path: PathBuf,
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Make a token for USER; it is printed once, alone on the last line.
    Add {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        user: String,
        /// How long it is valid ("90d", "12h"); without it, until revoked.
        #[arg(long, value_parser = humantime::parse_duration)]
        expires: Option<std::time::Duration>,
    },
    /// List tokens (id, user, created, expires); never a secret.
    List {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        user: Option<String>,
    },
    /// Revoke the token with this id (as `token list` shows it).
    Revoke {
        #[command(flatten)]
        config: ConfigArg,
        id: String,
    },
}

fn load(path: &Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Ls {
            config: ConfigArg { path: config },
            filter,
            json,
        } => ls(&config, filter.as_deref(), json),
        Command::Warm {
            server,
            remote,
            jobs,
            files,
        } => warm(mirrorcache::ops::warm::Options {
            server,
            remote,
            files,
            jobs,
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
        }),
        Command::Token { command } => token(command),
        Command::Advisories {
            command:
                AdvisoriesCommand::Import {
                    config: ConfigArg { path: config },
                    name,
                    file,
                },
        } => with_config(&config, |config| {
            let name = name.unwrap_or_else(|| match config.advisories.as_slice() {
                [only] => only.name.clone(),
                _ => "imported".to_string(),
            });
            let report = mirrorcache::advisories::import(&config.storage.path, &name, &file)
                .map_err(anyhow::Error::msg)?;
            let packages: usize = report.packages.values().sum();
            Ok(format!(
                "feed {name:?}: {} records, {packages} packages indexed; a running server reads it within {}s",
                report.records,
                mirrorcache::advisories::SAVED_POLL.as_secs()
            ))
        }),
        Command::Export {
            config: ConfigArg { path: config },
            out,
            since,
            sign,
            select,
        } => with_config(&config, |config| {
            use mirrorcache::ops::bundle::export;
            let options = export::Options {
                out,
                select,
                since,
                sign,
                terminal: stderr_is_terminal(),
            };
            runtime().block_on(export::run(&config, &options))
        }),
        Command::Import {
            config: ConfigArg { path: config },
            verify_key,
            bundle,
        } => with_config(&config, |config| {
            use mirrorcache::ops::bundle::import;
            let options = import::Options {
                bundle,
                verify_key,
                terminal: stderr_is_terminal(),
            };
            runtime().block_on(import::run(&config, &options))
        }),
        Command::Check {
            config: ConfigArg { path },
        } => match load(&path) {
            Ok(c) => {
                for warning in &c.warnings {
                    eprintln!("warning: {warning}");
                }
                let remotes = c.remotes.iter().filter(|r| !r.feed).count();
                println!("{}: ok ({remotes} remotes)", path.display());
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Serve {
            config: ConfigArg { path },
        } => {
            let config = match load(&path) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let log_writer = match init_logging(&config.log) {
                Ok(writer) => writer,
                Err(e) => {
                    eprintln!("error: starting the log's writer: {e}");
                    return ExitCode::FAILURE;
                }
            };
            for warning in &config.warnings {
                tracing::warn!("{warning}");
            }
            let served = runtime().block_on(serve(config, &path));
            // The log's last lines before the error that ends it.
            drop(log_writer);
            match served {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Verify {
            config: ConfigArg { path },
            remove,
        } => {
            let config = match load(&path) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let started = std::time::Instant::now();
            let observer = mirrorcache::ops::progress::VerifyProgress::default();
            let verified = runtime().block_on(mirrorcache::cache::verify::run_observed(
                &config, remove, &observer,
            ));
            observer.finish();
            exit_with(verified, |report| {
                println!("{report} in {:.1} s", started.elapsed().as_secs_f64());
                report.is_clean() || report.removed
            })
        }
    }
}

fn stderr_is_terminal() -> bool {
    std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// Loads the config, runs `work` with it and prints what it reports (exit
/// 0), or the error (exit 2).
fn with_config<T: std::fmt::Display>(
    path: &Path,
    work: impl FnOnce(Config) -> anyhow::Result<T>,
) -> ExitCode {
    match load(path) {
        Ok(config) => exit_with(work(config), |done| {
            println!("{done}");
            true
        }),
        Err(code) => code,
    }
}

fn ls(path: &Path, filter: Option<&str>, json: bool) -> ExitCode {
    let config = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    exit_with(
        runtime().block_on(mirrorcache::ops::ls::list(&config, filter)),
        |rows| mirrorcache::ops::ls::print(&rows, json, &mut std::io::stdout().lock()).is_ok(),
    )
}

fn token(command: TokenCommand) -> ExitCode {
    use mirrorcache::ops::token;
    let mut out = std::io::stdout().lock();
    match command {
        TokenCommand::Add {
            config: ConfigArg { path: config },
            user,
            expires,
        } => {
            let config = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            exit_with(
                runtime().block_on(token::add(&config, &user, expires)),
                |(row, text)| token::print_added(&row, &text, &mut out).is_ok(),
            )
        }
        TokenCommand::List {
            config: ConfigArg { path: config },
            user,
        } => {
            let config = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            exit_with(
                runtime().block_on(token::list(&config, user.as_deref())),
                |rows| token::print_list(&rows, &mut out).is_ok(),
            )
        }
        TokenCommand::Revoke {
            config: ConfigArg { path: config },
            id,
        } => {
            let config = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            exit_with(runtime().block_on(token::revoke(&config, &id)), |found| {
                if found {
                    let _ = writeln!(out, "revoked {id}");
                } else {
                    eprintln!("no token {id}");
                }
                found
            })
        }
    }
}

fn warm(options: mirrorcache::ops::warm::Options) -> ExitCode {
    exit_with(
        runtime().block_on(mirrorcache::ops::warm::run(&options)),
        |summary| {
            println!("{summary}");
            summary.failed.is_empty()
        },
    )
}

/// An operator command's exit: 0 when `done` says all went well, 1 when it
/// found problems, 2 (with the error on stderr) when it could not run.
fn exit_with<T>(result: anyhow::Result<T>, done: impl FnOnce(T) -> bool) -> ExitCode {
    match result {
        Ok(value) => {
            if done(value) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn serve(config: Config, path: &Path) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let running = Running::start(&config).await?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = term.recv() => break,
            _ = hup.recv() => match Config::load(path) {
                Ok(new) => running.reload(&new),
                Err(error) => tracing::error!(%error, "new config refused; keeping the running config"),
            },
        }
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// Logs go to stderr from a buffer (`[log] buffer`, `[log] flush`), so a
/// request neither waits on a write(2) nor wakes a thread for its line; the
/// returned guard writes what is waiting when `main` ends.
fn init_logging(config: &LogConfig) -> std::io::Result<mirrorcache::logbuf::Flusher> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.level));
    let limit = usize::try_from(config.buffer).unwrap_or(usize::MAX);
    let (writer, guard) =
        mirrorcache::logbuf::buffered(Box::new(std::io::stderr()), limit, config.flush)?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(false)
        .with_writer(writer.clone());
    match config.format {
        // The default text format; request lines written straight to the
        // buffer in that format.
        LogFormat::Text => {
            mirrorcache::logline::write_requests_to(writer);
            builder.init()
        }
        LogFormat::Json => builder.json().init(),
    }
    Ok(guard)
}
