mod capture_file;
mod errors;
mod functions;
mod gluster;
mod lifecycle;
mod model;
mod sampling;
mod sockets;
