"""``synclane``: the command line client. It talks to the API and the websockets only.

    synclane login http://127.0.0.1:8000 --username alice
    synclane submit job.yaml && synclane watch 7

It imports nothing of the control plane's server side (an import-linter contract holds it
to that), so it runs anywhere the package is installed.
"""
