//! `flowctrl`: look at a host's task table, and change it when asked.
//!
//! Every command but `set` and `reap` reads the table through a read-only
//! view ([`flowctrl::View`]): it registers nothing, takes no permit and no
//! attachment slot, and works on another user's table wherever its file
//! mode allows reading. `set` and `reap` attach as a service would.
//! Exit codes: 0 done, 1 an error (one line on stderr), 2 a usage error.

mod config;
mod fleet;
mod http;
mod json;
mod keys;
mod manage;
mod metrics;
mod set;
mod show;
mod text;
mod top;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Look at a flowctrl task table, and change it when asked.
#[derive(Parser)]
#[command(name = "flowctrl", version)]
struct Cli {
    /// The table: a path, or a bare name in /dev/shm.
    #[arg(
        short,
        long,
        global = true,
        env = "FLOWCTRL_TABLE",
        default_value = "/dev/shm/flowctrl"
    )]
    table: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a config file as a table's open would, and say what applying
    /// it would change on the table it names (or `--table`).
    Check {
        /// The TOML file.
        file: PathBuf,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Config files: `config check FILE`.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Every task and the configuration in force.
    Tasks {
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
        /// The config file the table's processes read, to say which fields
        /// come from it (default: FLOWCTRL_CONFIG's, if set).
        #[arg(long, env = "FLOWCTRL_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Every task's configuration, counters, concurrency and global quota.
    Stats {
        /// Only this task.
        task: Option<String>,
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
        /// Also each live process's share since it attached.
        #[arg(long)]
        processes: bool,
    },
    /// A live view of every task's and balancer's rates.
    Top {
        /// Print one frame (two samples an interval apart) and exit.
        #[arg(long)]
        once: bool,
        /// Seconds between frames.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
    },
    /// Change a task's configuration for the whole host.
    Set {
        /// The task's name.
        task: String,
        /// Fields to change, all at once: local_rate, burst,
        /// max_concurrency, global_rate, slice_ms, chunk, fallback
        /// (share, local, deny or a rate), global_burst, shards, limiter ("aimd",
        /// "vegas alpha=3", ...), min_limit, max_limit, initial_limit, shadow (true: refusals counted and admitted); key_rate, key_max_concurrency, key_shadow, key_overflow, key_capacity, key_override.NAME for limits per caller.
        #[arg(required = true, value_name = "KEY=VALUE")]
        fields: Vec<String>,
    },
    /// A keyed task's keys: its key file's counters and its hottest keys.
    Keys {
        /// The task's name.
        task: String,
        /// How many keys to list.
        #[arg(long, default_value_t = 20)]
        top: usize,
        /// Rank by `admitted` or `refused`.
        #[arg(long, default_value = "admitted")]
        by: String,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Check that the path names the table mapped and that every task's
    /// concurrency count equals what the processes' ledgers hold.
    Check,
    /// Give back now what dead processes held.
    Reap,
    /// A task's live hosts, from the census in the quota store.
    Fleet {
        /// The task's name.
        task: String,
        /// The fleet's store: redis://host:port/db, rediss://..., or a
        /// [redis|rediss]+sentinel:// or +cluster:// URL
        #[arg(long, env = "FLOWCTRL_STORE")]
        store: String,
        /// The task's slice length (default: its store record's, else 1000).
        #[arg(long)]
        slice_ms: Option<u32>,
        /// One JSON document instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Run a manager: own the thresholds of the tasks a config file names
    /// (their store records and the next slices' keys), one active
    /// instance by lease; reload on SIGHUP or a change to the file.
    Manage {
        /// The TOML file: [table] store, [manager], the tasks' global
        /// fields and policies.
        #[arg(long)]
        config: PathBuf,
        /// Serve the manager's metrics (Prometheus text) on this address.
        #[arg(long)]
        metrics: Option<String>,
        /// Log level on stderr: error, warn, info, debug.
        #[arg(long, default_value = "info", value_parser = parse_level)]
        log: log::LevelFilter,
    },
    /// Serve the table's metrics in the Prometheus text format (GET
    /// /metrics; GET /healthz answers "ok").
    Metrics {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: String,
    },
}

fn parse_level(text: &str) -> std::result::Result<log::LevelFilter, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not one of off, error, warn, info, debug, trace"))
}

/// Commands fail with the library's one error type; its message is the
/// line printed.
pub(crate) type Result<T = ()> = flowctrl::Result<T>;

/// An error of the command line itself (a bad `KEY=VALUE`, a bad address).
pub(crate) fn invalid(message: impl Into<String>) -> flowctrl::Error {
    flowctrl::Error::new(flowctrl::ErrorKind::InvalidArgument, message)
}

fn run(cli: Cli) -> Result<()> {
    let table = &cli.table;
    match cli.command {
        Command::Tasks { json, config } => show::tasks(table, json, config.as_deref()),
        Command::Stats {
            task,
            json,
            processes,
        } => show::stats(table, task.as_deref(), json, processes),
        Command::Top { once, interval } => top::run(table, once, interval),
        Command::Set { task, fields } => set::run(table, &task, &fields),
        Command::Keys {
            task,
            top,
            by,
            json,
        } => keys::run(table, &task, top, &by, json),
        Command::Check => show::check(table),
        Command::Reap => set::reap(table),
        Command::Fleet {
            task,
            store,
            slice_ms,
            json,
        } => fleet::run(&store, &task, slice_ms, json),
        Command::Manage {
            config,
            metrics,
            log,
        } => manage::run(&config, metrics.as_deref(), log),
        Command::Metrics { listen } => metrics::serve(table, &listen),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => config::check(&file, table),
    }
}

fn main() -> ExitCode {
    // Output piped into `head` ends the process quietly, as other tools do.
    // SAFETY: restoring a signal's default disposition.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    std::panic::set_hook(Box::new(|info| {
        eprintln!("flowctrl: internal error: {info}");
    }));
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("flowctrl: {}", text::printable(&e.to_string()));
            ExitCode::FAILURE
        }
    }
}
