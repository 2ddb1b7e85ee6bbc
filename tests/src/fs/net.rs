//! The cluster's network: a bridge in the root namespace (the client's and
//! MooseFS master's address), one namespace per server and one for a third
//! party (the network hog's source), each joined to the bridge by a veth
//! pair, with private addresses only this harness uses.

use super::{PREFIX, Result, sh};

/// Subnet of the bridge (a /24 of private addresses).
pub const SUBNET: &str = "10.219.0";
/// The root namespace's address on the bridge (client, MooseFS master).
pub const CLIENT_ADDR: &str = "10.219.0.254";
/// The third party's address.
pub const HOG_ADDR: &str = "10.219.0.100";

/// Names of the network's parts (none longer than 15 bytes, the kernel's
/// limit for interfaces).
#[derive(Clone, Debug)]
pub struct Net {
    servers: usize,
}

impl Net {
    /// The network of `servers` servers.
    pub fn new(servers: usize) -> Self {
        Self { servers }
    }

    /// The bridge.
    pub fn bridge(&self) -> String {
        format!("{PREFIX}0")
    }

    /// Server `i`'s (0-based) namespace.
    pub fn server_ns(&self, i: usize) -> String {
        format!("{PREFIX}-s{}", i + 1)
    }

    /// The host end of server `i`'s veth.
    pub fn server_veth(&self, i: usize) -> String {
        format!("{PREFIX}-v{}", i + 1)
    }

    /// Server `i`'s address.
    pub fn server_addr(&self, i: usize) -> String {
        format!("{SUBNET}.{}", i + 1)
    }

    /// The third party's namespace.
    pub fn hog_ns(&self) -> String {
        format!("{PREFIX}-hog")
    }

    fn hog_veth(&self) -> String {
        format!("{PREFIX}-vh")
    }

    /// Every namespace.
    pub fn namespaces(&self) -> Vec<String> {
        let mut v: Vec<String> = (0..self.servers).map(|i| self.server_ns(i)).collect();
        v.push(self.hog_ns());
        v
    }

    /// Builds the bridge and namespaces; `link_rate` (tc syntax, empty for
    /// none) caps each server's link both ways.
    pub fn build(&self, link_rate: &str) -> Result<()> {
        let br = self.bridge();
        sh(10, None, "ip", &["link", "add", &br, "type", "bridge"])?;
        sh(
            10,
            None,
            "ip",
            &["addr", "add", &format!("{CLIENT_ADDR}/24"), "dev", &br],
        )?;
        sh(10, None, "ip", &["link", "set", &br, "up"])?;
        let mut hosts: Vec<(String, String, String)> = (0..self.servers)
            .map(|i| (self.server_ns(i), self.server_veth(i), self.server_addr(i)))
            .collect();
        hosts.push((self.hog_ns(), self.hog_veth(), HOG_ADDR.to_string()));
        for (i, (ns, veth, addr)) in hosts.iter().enumerate() {
            sh(10, None, "ip", &["netns", "add", ns])?;
            sh(
                10,
                None,
                "ip",
                &[
                    "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
                ],
            )?;
            sh(10, None, "ip", &["link", "set", veth, "master", &br, "up"])?;
            let ip = |args: &[&str]| -> Result<String> {
                let mut all = vec!["-n", ns.as_str()];
                all.extend_from_slice(args);
                sh(10, None, "ip", &all)
            };
            ip(&["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
            ip(&["link", "set", "eth0", "up"])?;
            ip(&["link", "set", "lo", "up"])?;
            if i < self.servers && !link_rate.is_empty() {
                // Egress of the host end is what the server receives; of
                // its own end, what it sends.
                let tbf = [
                    "root", "tbf", "rate", link_rate, "burst", "256kb", "latency", "100ms",
                ];
                let mut host = vec!["qdisc", "add", "dev", veth.as_str()];
                host.extend_from_slice(&tbf);
                sh(10, None, "tc", &host)?;
                let mut own = vec!["-n", ns.as_str(), "qdisc", "add", "dev", "eth0"];
                own.extend_from_slice(&tbf);
                sh(10, None, "tc", &own)?;
            }
        }
        Ok(())
    }

    /// Removes the namespaces (their veth pairs go with them) and the
    /// bridge; best effort.
    pub fn remove(&self) {
        for ns in self.namespaces() {
            if std::path::Path::new(&format!("/run/netns/{ns}")).exists() {
                let _ = sh(10, None, "ip", &["netns", "del", &ns]);
            }
        }
        let mut links: Vec<String> = (0..self.servers).map(|i| self.server_veth(i)).collect();
        links.push(self.hog_veth());
        links.push(self.bridge());
        for l in links {
            if std::path::Path::new(&format!("/sys/class/net/{l}")).exists() {
                let _ = sh(10, None, "ip", &["link", "del", &l]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interface names must fit the kernel's 15 bytes.
    #[test]
    fn names_fit_and_do_not_collide() {
        let n = Net::new(4);
        let mut names = vec![n.bridge(), n.hog_veth()];
        names.extend((0..4).map(|i| n.server_veth(i)));
        for name in &names {
            assert!(name.len() <= 15, "{name}");
        }
        let mut all = names.clone();
        all.extend(n.namespaces());
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count);
        assert_eq!(n.server_addr(3), "10.219.0.4");
    }
}
