from tests.sockets import disconnect_sockets  # noqa: F401 - autouse: every test socket is closed
