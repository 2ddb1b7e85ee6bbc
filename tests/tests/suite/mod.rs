mod capture_file;
mod errors;
mod functions;
mod lifecycle;
mod model;
mod mpi;
mod sampling;
mod sockets;
