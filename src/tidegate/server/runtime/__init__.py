"""The server's runtime under uvicorn: the one package that imports it. The app factory each worker
runs (`factory`), the supervisor of `tidegate serve --workers N` (`workers`), the guarded HTTP
protocol (`guard`), the drain on a stop or a reload's hand-off (`drain`), uvicorn's server with
tidegate's steps around it (`server`) and the write shortcut into uvicorn's request cycle (`shortcuts`)."""
