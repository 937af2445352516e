//! `flowctrl`: look at a host's task table, and change it when asked.
//!
//! Every command but `set` and `reap` reads the table through a read-only
//! view ([`flowctrl::View`]): it registers nothing, takes no permit and no
//! attachment slot, and works on another user's table wherever its file
//! mode allows reading. `set` and `reap` attach as a service would.
//! Exit codes: 0 done, 1 a runtime failure (one line on stderr), 2 a usage
//! error: clap's own, and the values of the command line flowctrl refuses
//! before reading any table (a malformed or unknown `KEY=VALUE`, an option
//! out of range).

mod config;
mod fleet;
mod http;
mod json;
mod keys;
mod logging;
mod manage;
mod metrics;
mod reap;
mod set;
mod set_keys;
mod show;
mod table;
mod text;
mod top;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};

/// Look at a flowctrl task table, and change it when asked.
#[derive(Parser)]
#[command(name = "flowctrl", version)]
pub(crate) struct Cli {
    /// The table: a path, or a bare name in /dev/shm (default: the
    /// `[table] path` of the file FLOWCTRL_CONFIG names, else
    /// /dev/shm/flowctrl).
    #[arg(short, long, global = true, env = "FLOWCTRL_TABLE")]
    table: Option<PathBuf>,
    /// The format of log lines on stderr: text (an RFC 3339 time, the
    /// level, the message) or json (one object a line: time, level,
    /// message, and task, pid, host, store where known). Their level:
    /// FLOWCTRL_LOG (default warn), `manage --log`, info for `metrics`.
    #[arg(long, global = true, value_enum, default_value_t = logging::Format::Text)]
    log_format: logging::Format,
    #[command(subcommand)]
    command: Command,
}

/// The table the commands read when `--table` is not given: the one a
/// service would open, the `[table] path` of the file FLOWCTRL_CONFIG
/// names, else the default.
const DEFAULT_TABLE: &str = "/dev/shm/flowctrl";

#[derive(Subcommand)]
enum TableCommand {
    /// Create the table (as a service's open would), or say that it exists
    /// and its geometry.
    Create {
        /// Task slots.
        #[arg(long)]
        capacity: Option<u32>,
        /// Attachments at once (processes, or table handles).
        #[arg(long)]
        max_processes: Option<u32>,
        /// Balancer slots.
        #[arg(long)]
        balancers: Option<u32>,
        /// File mode, in octal (e.g. 0640); group or other write bits make
        /// a shared table.
        #[arg(long, value_parser = parse_mode)]
        mode: Option<u32>,
    },
    /// The table's file size, layout version and geometry.
    Info {
        /// One JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Check a config file as a table's open would, and say what applying
    /// it would change on a table: `--table`'s if given, else the one the
    /// file names.
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
        /// Each frame as one JSON document on one line (newline-delimited;
        /// tasks as `stats --json` has them, plus their rates).
        #[arg(long)]
        json: bool,
        /// The order of the tasks: the table's own, by name, or largest
        /// first by admitted/s, limited/s (every reason), in_flight, limit
        /// or rtt.
        #[arg(long, value_enum, default_value_t = top::SortKey::Table)]
        sort: top::SortKey,
    },
    /// Change a task's configuration for the whole host.
    Set {
        /// The task's name.
        task: String,
        /// Say what would change (old -> new per field), and change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Fields to change, all at once: local_rate, burst,
        /// max_concurrency (at least 1; none or off: no cap), global_rate, slice_ms, chunk, fallback
        /// (share, local, deny or a rate), global_burst, shards, limiter ("aimd",
        /// "vegas alpha=3", ...), min_limit, max_limit, initial_limit, shadow (true: refusals counted and admitted); key_rate, key_max_concurrency, key_shadow, key_overflow, key_capacity, key_global (a rate across the fleet, or none), key_global_slice, key_global_local, key_global_fallback, key_override.NAME for limits per caller.
        #[arg(required = true, value_name = "KEY=VALUE")]
        fields: Vec<String>,
    },
    /// A keyed task's keys: its key file's counters and its hottest keys
    /// (with each key's global rate, where the task's keys have one).
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
    /// The table file itself: `table create`, `table info`.
    Table {
        #[command(subcommand)]
        command: TableCommand,
    },
    /// Print a completion script for a shell (bash, zsh, fish).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the manual page (roff), e.g. `flowctrl man | man -l -`.
    Man,
}

fn parse_mode(text: &str) -> std::result::Result<u32, String> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    match u32::from_str_radix(digits, 8) {
        Ok(mode) if mode <= 0o777 => Ok(mode),
        _ => Err(format!(
            "{text:?} is not a file mode in octal (0600, 0640, ...)"
        )),
    }
}

fn parse_level(text: &str) -> std::result::Result<log::LevelFilter, String> {
    text.parse()
        .map_err(|_| format!("{text:?} is not one of off, error, warn, info, debug, trace"))
}

/// Why a command failed; the message is the line printed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The command line is wrong as written: exit 2, as clap's own errors.
    Usage(String),
    /// The command ran and failed: exit 1.
    Runtime(flowctrl::Error),
}

impl From<flowctrl::Error> for Failure {
    fn from(e: flowctrl::Error) -> Self {
        Failure::Runtime(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Usage(m) => f.write_str(m),
            Failure::Runtime(e) => write!(f, "{e}"),
        }
    }
}

pub(crate) type Result<T = ()> = std::result::Result<T, Failure>;

/// A runtime failure of the command's own (a task without key limits, a
/// port in use).
pub(crate) fn invalid(message: impl Into<String>) -> Failure {
    Failure::Runtime(flowctrl::Error::new(
        flowctrl::ErrorKind::InvalidArgument,
        message,
    ))
}

/// An error of the command line itself (a bad `KEY=VALUE`, an option out
/// of range): exit 2.
pub(crate) fn usage(message: impl Into<String>) -> Failure {
    Failure::Usage(message.into())
}

/// A library error about a word of the command line (a rate, a limiter
/// spec that does not parse): exit 2.
pub(crate) fn usage_of(e: flowctrl::Error) -> Failure {
    Failure::Usage(e.message().to_string())
}

/// The table the commands read: `--table` (or FLOWCTRL_TABLE), else the
/// `[table] path` of the file FLOWCTRL_CONFIG names, as a service's open
/// finds it, else the default.
fn table_path(given: Option<PathBuf>) -> Result<PathBuf> {
    if let Some(path) = given {
        return Ok(path);
    }
    match std::env::var_os(flowctrl::CONFIG_ENV) {
        Some(file) if !file.is_empty() => {
            let config = flowctrl::ConfigFile::load(Path::new(&file)).map_err(|e| {
                invalid(format!(
                    "{} (FLOWCTRL_CONFIG names it; --table reads a table without it)",
                    e.message()
                ))
            })?;
            Ok(config
                .table
                .path
                .unwrap_or_else(|| PathBuf::from(DEFAULT_TABLE)))
        }
        _ => Ok(PathBuf::from(DEFAULT_TABLE)),
    }
}

/// A command's name in its log lines, and its level: `manage`'s `--log`,
/// info for `metrics`, else `FLOWCTRL_LOG` (warn when unset or invalid,
/// the latter said once on stderr).
fn log_setting(command: &Command) -> (&'static str, log::LevelFilter) {
    let name = match command {
        Command::Manage { log, .. } => return ("manage", *log),
        Command::Metrics { .. } => return ("metrics", log::LevelFilter::Info),
        Command::Config { .. } => "config",
        Command::Tasks { .. } => "tasks",
        Command::Stats { .. } => "stats",
        Command::Top { .. } => "top",
        Command::Set { .. } => "set",
        Command::Keys { .. } => "keys",
        Command::Check => "check",
        Command::Reap => "reap",
        Command::Fleet { .. } => "fleet",
        Command::Table { .. } => "table",
        Command::Completions { .. } => "completions",
        Command::Man => "man",
    };
    let level = match std::env::var("FLOWCTRL_LOG") {
        Err(_) => log::LevelFilter::Warn,
        Ok(text) => parse_level(&text.to_ascii_lowercase()).unwrap_or_else(|e| {
            eprintln!("flowctrl: FLOWCTRL_LOG: {e}; logging warnings and errors");
            log::LevelFilter::Warn
        }),
    };
    (name, level)
}

fn run(cli: Cli) -> Result<()> {
    let log_format = cli.log_format;
    match cli.command {
        Command::Completions { shell } => {
            let shell = match shell {
                Shell::Bash => clap_complete::Shell::Bash,
                Shell::Zsh => clap_complete::Shell::Zsh,
                Shell::Fish => clap_complete::Shell::Fish,
            };
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), "flowctrl", &mut out);
            return Ok(());
        }
        Command::Man => {
            let mut out = Vec::new();
            clap_mangen::Man::new(Cli::command())
                .render(&mut out)
                .and_then(|()| std::io::Write::write_all(&mut std::io::stdout().lock(), &out))
                .map_err(|e| invalid(format!("cannot write the manual page: {e}")))?;
            return Ok(());
        }
        _ => {}
    }
    let (name, level) = log_setting(&cli.command);
    logging::init(name, level, log_format);
    // Resolved by the commands that read a table only: `fleet` and
    // `manage` work whatever FLOWCTRL_CONFIG holds.
    let given = cli.table;
    let table = || table_path(given.clone());
    match cli.command {
        Command::Completions { .. } | Command::Man => Ok(()),
        Command::Tasks { json, config } => show::tasks(&table()?, json, config.as_deref()),
        Command::Stats {
            task,
            json,
            processes,
        } => show::stats(&table()?, task.as_deref(), json, processes),
        Command::Top {
            once,
            interval,
            json,
            sort,
        } => top::run(
            &table()?,
            top::Options {
                once,
                interval,
                json,
                sort,
            },
        ),
        Command::Set {
            task,
            fields,
            dry_run,
        } => set::run(&table()?, &task, &fields, dry_run),
        Command::Keys {
            task,
            top,
            by,
            json,
        } => keys::run(&table()?, &task, top, &by, json),
        Command::Check => show::check(&table()?),
        Command::Reap => reap::reap(&table()?),
        Command::Fleet {
            task,
            store,
            slice_ms,
            json,
        } => fleet::run(&store, &task, slice_ms, json),
        Command::Manage {
            config, metrics, ..
        } => manage::run(&config, metrics.as_deref()),
        Command::Metrics { listen } => metrics::serve(&table()?, &listen),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => config::check(&file, given.as_deref(), || table_path(None)),
        Command::Table { command } => match command {
            TableCommand::Create {
                capacity,
                max_processes,
                balancers,
                mode,
            } => table::create(
                &table()?,
                table::Geometry {
                    capacity,
                    max_processes,
                    balancers,
                    mode,
                },
            ),
            TableCommand::Info { json } => table::info(&table()?, json),
        },
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
            match e {
                Failure::Usage(_) => ExitCode::from(2),
                Failure::Runtime(_) => ExitCode::FAILURE,
            }
        }
    }
}
