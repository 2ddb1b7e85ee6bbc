mod capture_file;
mod errors;
mod functions;
mod hydra;
mod lifecycle;
mod model;
mod sampling;
mod sockets;
