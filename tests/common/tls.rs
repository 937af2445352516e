//! TLS for test servers: a CA made here by `openssl` and a server
//! certificate it signs for 127.0.0.1, in a scratch directory. Servers are
//! given the certificate (TLS ports only); clients trust the CA, the
//! tests' control connections by its bytes, flowctrl in a child process
//! through `SSL_CERT_FILE` (which the system roots loader reads).

use std::path::PathBuf;

use super::Scratch;

pub struct Tls {
    pub ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    _scratch: Scratch,
}

impl Tls {
    pub fn make() -> Self {
        let scratch = Scratch::new("tls");
        let dir = scratch.dir().to_path_buf();
        let sh = |script: &str| {
            let ok = std::process::Command::new("sh")
                .arg("-c")
                .arg(script)
                .current_dir(&dir)
                .stderr(std::process::Stdio::null())
                .status()
                .expect("sh")
                .success();
            assert!(ok, "{script} (scripts/setup.sh installs openssl)");
        };
        sh(
            "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=flowctrl-test-ca",
        );
        sh(
            "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=127.0.0.1",
        );
        sh(
            "printf 'subjectAltName=IP:127.0.0.1\\n' > ext.cnf && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 2 -extfile ext.cnf",
        );
        Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("server.pem"),
            key: dir.join("server.key"),
            _scratch: scratch,
        }
    }

    /// A server's configuration lines: TLS on `port` only (no plain port),
    /// its certificate, and no client certificates asked for.
    pub fn server_lines(&self, port: u16) -> Vec<String> {
        vec![
            "port 0".into(),
            format!("tls-port {port}"),
            format!("tls-cert-file {}", self.cert.display()),
            format!("tls-key-file {}", self.key.display()),
            format!("tls-ca-cert-file {}", self.ca.display()),
            "tls-auth-clients no".into(),
        ]
    }

    /// The CA certificate's bytes (PEM).
    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(&self.ca).unwrap()
    }
}
