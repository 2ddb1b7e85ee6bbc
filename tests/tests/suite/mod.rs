mod capture_file;
mod errors;
mod functions;
mod lifecycle;
mod sampling;
mod sockets;
