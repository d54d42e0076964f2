// placeholder, replaced as the layer is written
