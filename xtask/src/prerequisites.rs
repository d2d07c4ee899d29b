//! What the tests need besides Rust: services to reach, and programs that
//! Debian's packages install.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long a service may take to answer.
const TIMEOUT: Duration = Duration::from_secs(3);

/// A service the tests reach over TCP.
pub struct Service {
    name: &'static str,
    host: String,
    port: u16,
    /// A request and the start of the answer that says the service is up
    /// (Redis: `PING` and `+PONG`); `None`: a connection is enough.
    probe: Option<(&'static [u8], &'static [u8])>,
}

impl Service {
    /// PostgreSQL at a `postgres://USER@HOST:PORT/DB` URL (port 5432 when
    /// absent).
    pub fn postgres(url: &str) -> Self {
        let (host, port) = host_port(url, 5432);
        Self { name: "PostgreSQL", host, port, probe: None }
    }

    /// MySQL or MariaDB at a `mysql://USER@HOST:PORT/DB` URL (port 3306
    /// when absent).
    pub fn mysql(url: &str) -> Self {
        let (host, port) = host_port(url, 3306);
        Self { name: "MySQL", host, port, probe: None }
    }

    /// Redis at a `redis://HOST:PORT` URL (port 6379 when absent).
    pub fn redis(url: &str) -> Self {
        let (host, port) = host_port(url, 6379);
        Self { name: "Redis", host, port, probe: Some((b"PING\r\n", b"+PONG")) }
    }

    /// Whether the service answers within [`TIMEOUT`]; the error says which
    /// one does not, where.
    pub fn check(&self) -> Result<(), String> {
        let unreachable =
            |why: String| format!("{} is not reachable at {}:{}: {why}", self.name, self.host, self.port);
        let address = (self.host.as_str(), self.port)
            .to_socket_addrs()
            .map_err(|e| unreachable(e.to_string()))?
            .next()
            .ok_or_else(|| unreachable("no address".into()))?;
        let mut stream =
            TcpStream::connect_timeout(&address, TIMEOUT).map_err(|e| unreachable(e.to_string()))?;
        if let Some((request, answer)) = self.probe {
            stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| unreachable(e.to_string()))?;
            stream.write_all(request).map_err(|e| unreachable(e.to_string()))?;
            let mut got = vec![0; answer.len()];
            stream.read_exact(&mut got).map_err(|e| unreachable(e.to_string()))?;
            if got != answer {
                return Err(unreachable(format!("answered {:?}", String::from_utf8_lossy(&got))));
            }
        }
        Ok(())
    }
}

/// The host and port of `scheme://[USER[:PASSWORD]@]HOST[:PORT][/…]`.
fn host_port(url: &str, default_port: u16) -> (String, u16) {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    match host_port.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => {
            (host.to_string(), port.parse().unwrap_or(default_port))
        }
        _ => (host_port.to_string(), default_port),
    }
}

/// A program some tests need, and the Debian packages that install it.
pub struct Tool {
    /// What is checked, e.g. `PHP with pdo_pgsql`.
    pub name: &'static str,
    /// Which tests need it.
    pub needed_by: &'static str,
    /// The Debian packages that install it.
    pub packages: &'static [&'static str],
    /// A command and a word its output must hold (empty: it must only run).
    check: (&'static str, &'static [&'static str], &'static str),
}

/// Everything the tests run besides cargo.
pub const TOOLS: &[Tool] = &[
    Tool {
        name: "Node.js",
        needed_by: "the webhook conformance tests sign with the providers' npm libraries",
        packages: &["nodejs"],
        check: ("node", &["--version"], ""),
    },
    Tool {
        name: "npm",
        needed_by: "the webhook conformance tests and the Node.js outbox example install their libraries",
        packages: &["npm"],
        check: ("npm", &["--version"], ""),
    },
    Tool {
        name: "Python 3 with venv",
        needed_by: "the Python outbox example runs in a virtual environment",
        packages: &["python3", "python3-venv"],
        check: ("python3", &["-c", "import venv, ensurepip"], ""),
    },
    Tool {
        name: "PHP with pdo_pgsql",
        needed_by: "the PHP outbox example",
        packages: &["php-cli", "php-pgsql"],
        check: ("php", &["-m"], "pdo_pgsql"),
    },
    Tool {
        name: "PHP with pdo_sqlite",
        needed_by: "the PHP outbox example on SQLite",
        packages: &["php-cli", "php-sqlite3"],
        check: ("php", &["-m"], "pdo_sqlite"),
    },
    Tool {
        name: "PHP with pdo_mysql",
        needed_by: "the PHP outbox example on MySQL and MariaDB",
        packages: &["php-cli", "php-mysql"],
        check: ("php", &["-m"], "pdo_mysql"),
    },
    Tool {
        name: "a C++ compiler",
        needed_by: "npm builds better-sqlite3 (the Node.js outbox example on SQLite) when no prebuilt binary fits",
        packages: &["g++"],
        check: ("g++", &["--version"], ""),
    },
    Tool {
        name: "make",
        needed_by: "npm builds better-sqlite3 (the Node.js outbox example on SQLite) when no prebuilt binary fits",
        packages: &["make"],
        check: ("make", &["--version"], ""),
    },
    Tool {
        name: "Chromium",
        needed_by: "the dashboard test drives a real browser",
        packages: &["chromium"],
        check: ("chromium", &["--version"], ""),
    },
    Tool {
        name: "promtool",
        needed_by: "the metrics test checks GET /metrics with Prometheus' own linter",
        packages: &["prometheus"],
        check: ("promtool", &["--version"], ""),
    },
    Tool {
        name: "chromedriver",
        needed_by: "the dashboard test drives a real browser",
        packages: &["chromium-driver"],
        check: ("chromedriver", &["--version"], ""),
    },
];

impl Tool {
    /// Whether the program runs (and says what it must).
    pub fn present(&self) -> bool {
        let (program, args, word) = self.check;
        Command::new(program)
            .args(args)
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).contains(word))
    }
}

/// Whether this process runs as root (`id -u` says 0).
pub fn running_as_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

/// Installs Debian packages. The machine may still be running its own apt
/// when this starts, and a mirror may answer late: waits for the locks (up
/// to 5 minutes), refreshes the package lists and tries three times.
pub fn apt_install(packages: &[&str]) -> Result<(), String> {
    for attempt in 1..=3 {
        eprintln!("installing {} (as root, attempt {attempt} of 3)", packages.join(" "));
        let lock = ["-o", "DPkg::Lock::Timeout=300"];
        // A failed refresh may still leave usable lists: install anyway.
        let _ = Command::new("apt-get").args(lock).args(["update", "-qq"]).status();
        let installed = Command::new("apt-get")
            .args(lock)
            .args(["install", "-y", "-qq"])
            .args(packages)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status();
        if installed.is_ok_and(|s| s.success()) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(10 * attempt));
    }
    Err(format!("apt-get could not install {}", packages.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::host_port;

    #[test]
    fn finds_host_and_port_in_service_urls() {
        assert_eq!(host_port("postgres://postgres@127.0.0.1:5432/test", 1), ("127.0.0.1".into(), 5432));
        assert_eq!(
            host_port("postgres://u:p@db.example:6000/x?sslmode=disable", 1),
            ("db.example".into(), 6000)
        );
        assert_eq!(host_port("redis://127.0.0.1", 6379), ("127.0.0.1".into(), 6379));
        assert_eq!(host_port("redis://localhost:6380/0", 6379), ("localhost".into(), 6380));
    }
}
